#!/usr/bin/env python3
"""The public API marker: every top-level function declaration of the public headers carries
MEGA_API (include/mega.h), the only functions libmega.so exports (it is built with
-fvisibility=hidden; docs/library.md).

  python3 scripts/mega_api.py include/*.h           mark the declarations that lack it
  python3 scripts/mega_api.py --check include/*.h   list them and exit 1 (tests/sh/test_exports.sh)

It reads C text, not C: comments, preprocessor lines (with continuations) and brace depth are
tracked, a statement runs to its ';' at depth 0, and a declaration is a statement naming
mega_xxx( that is not a typedef, struct, enum or union. A line that only invokes a macro (an
X-macro list expanding to declarations that carry MEGA_API themselves) is its own statement."""
import re, sys

DECL = re.compile(r'\bmega_\w+\s*\(')

def annotate(text):
    lines = text.split('\n')
    out, depth, in_comment, pp_cont = [], 0, False, False
    stmt_start = None  # index in out of the first line of the current statement
    stmt = ''
    prev_pp = ''
    for line in lines:
        code = line
        # strip comments for analysis
        s, i, res = code, 0, ''
        while i < len(s):
            if in_comment:
                j = s.find('*/', i)
                if j < 0: i = len(s); break
                in_comment = False; i = j + 2; continue
            if s.startswith('/*', i): in_comment = True; i += 2; continue
            if s.startswith('//', i): break
            res += s[i]; i += 1
        stripped = res.strip()
        if pp_cont or stripped.startswith('#') or prev_pp == '#ifdef __cplusplus':
            pp_cont = res.rstrip().endswith('\\')
            prev_pp = stripped
            out.append(line); continue
        prev_pp = stripped
        if stripped == '' and stmt == '':
            out.append(line); continue
        if stmt == '' and depth == 0 and re.match(r'^[A-Z][A-Z0-9_]*\(.*\)$', stripped):
            out.append(line); continue  # a macro invocation standing alone
        if stmt == '' and depth == 0:
            stmt_start = len(out)
        out.append(line)
        if depth == 0:
            stmt += ' ' + stripped
        depth += res.count('{') - res.count('}')
        if depth == 0 and (stripped.endswith(';') or stripped.endswith('}')):
            st = stmt.strip()
            if (stripped.endswith(';') and DECL.search(st) and not re.match(r'(typedef|struct|enum|union|extern "C"|MEGA_API)\b', st)
                    and '{' not in st):
                first = out[stmt_start]
                ind = len(first) - len(first.lstrip())
                out[stmt_start] = first[:ind] + 'MEGA_API ' + first[ind:]
            elif stripped.endswith(';') and re.match(r'extern\s+(?!"C")', st) and 'mega_' in st:
                first = out[stmt_start]
                out[stmt_start] = first.replace('extern ', 'extern MEGA_API ', 1)
            stmt = ''
        elif depth != 0 and stmt and '{' in res and stmt_start is not None and depth > 0 and stmt.count('{') == 0:
            pass
        if depth > 0 and '{' in res:
            stmt = stmt if stmt.strip().startswith(('typedef', 'struct', 'enum', 'union')) else ''
    return '\n'.join(out)

check = '--check' in sys.argv[1:]
missing = 0
for p in [a for a in sys.argv[1:] if a != '--check']:
    t = open(p).read()
    n = annotate(t)
    if n == t:
        continue
    if check:
        for i, (a, b) in enumerate(zip(t.split('\n'), n.split('\n'))):
            if a != b:
                print('%s:%d: a public declaration without MEGA_API: %s' % (p, i + 1, a.strip()[:100]))
                missing += 1
    else:
        open(p, 'w').write(n)
        print(p, n.count('MEGA_API') - t.count('MEGA_API'), 'declarations marked')
sys.exit(1 if missing else 0)

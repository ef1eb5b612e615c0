// The page of mega serve in a real browser: node page_test.mjs URL CHROMIUM SCREENSHOT
// Opens the page in headless Chromium, waits for the model's description (from /props), types a
// prompt, sets greedy sampling, presses Generate, and waits for the streamed text and the status
// line. Prints one JSON line: the model line, the generated text, the status, and how many times
// the output grew while the answer streamed in. Exits 1 (with the reason) when a step fails.
import puppeteer from 'puppeteer-core';

// With a fourth argument "translate" (an encoder-decoder's server) it fills the translation form
// with two sources instead and prints the model line, the output and the status.
const [url, chrome, shot, mode] = process.argv.slice(2);
const browser = await puppeteer.launch({
  executablePath: chrome,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
});
let rc = 0;
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(20000);
  const errors = [];
  page.on('pageerror', e => errors.push(String(e)));
  page.on('requestfailed', r => errors.push('request failed: ' + r.url()));
  await page.goto(url, { waitUntil: 'load' });
  await page.waitForFunction(() => document.getElementById('model').textContent.includes('parameters'));
  const model = await page.$eval('#model', e => e.textContent);
  if (mode === 'translate') {
    await page.type('#sources', 'abc\ngfedcba');
    await page.click('#tgo');
    await page.waitForFunction(() => /^(done|error)/.test(document.getElementById('status').textContent));
    const out = await page.$eval('#out', e => e.textContent);
    const status = await page.$eval('#status', e => e.textContent);
    const hidden = await page.$eval('#f', e => e.hidden);
    console.log(JSON.stringify({ model, out, status, hidden, errors }));
    await browser.close();
    process.exit(0);
  }
  await page.$eval('#prompt', e => { e.value = ''; });
  await page.type('#prompt', 'the cat ');
  for (const [id, v] of [['max_tokens', '48'], ['temperature', '0']]) {
    await page.$eval('#' + id, e => { e.value = ''; });
    await page.type('#' + id, v);
  }
  // count the updates of the output while it streams
  await page.evaluate(() => {
    window.__updates = 0;
    new MutationObserver(() => { window.__updates++; })
      .observe(document.getElementById('out'), { childList: true, subtree: true, characterData: true });
  });
  await page.click('#go');
  await page.waitForFunction(() => /^(done|error|stopped)/.test(document.getElementById('status').textContent));
  const gen = await page.$eval('#gen', e => e.textContent);
  const status = await page.$eval('#status', e => e.textContent);
  const updates = await page.evaluate(() => window.__updates);
  if (shot) await page.screenshot({ path: shot, fullPage: true });
  console.log(JSON.stringify({ model, gen, status, updates, errors }));
} catch (e) {
  console.log(JSON.stringify({ failed: String(e) }));
  rc = 1;
} finally {
  await browser.close();
}
process.exit(rc);

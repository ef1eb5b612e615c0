#include <sndfile.h>
int main(void) { return sf_version_string() == 0; }

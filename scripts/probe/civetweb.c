#include <civetweb.h>
int main(void) {
    mg_init_library(0);
    return mg_exit_library() == 1 ? 0 : 1;
}

#include <cjson/cJSON.h>
int main(void) { cJSON_Delete(cJSON_CreateObject()); return 0; }

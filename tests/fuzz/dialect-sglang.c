/* The sglang dialect under an entry name of its own, so that the three
 * dialects link into one fuzz target (dialects.h). */
#define narwhal_plugin_entry fuzz_entry_sglang
#include "../../plugins/dialect/sglang.c"

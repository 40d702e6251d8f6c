/* The llamacpp dialect under an entry name of its own, so that the three
 * dialects link into one fuzz target (dialects.h). */
#define narwhal_plugin_entry fuzz_entry_llamacpp
#include "../../plugins/dialect/llamacpp.c"

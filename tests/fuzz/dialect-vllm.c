/* The vllm dialect under an entry name of its own, so that the three
 * dialects link into one fuzz target (dialects.h). */
#define narwhal_plugin_entry fuzz_entry_vllm
#include "../../plugins/dialect/vllm.c"

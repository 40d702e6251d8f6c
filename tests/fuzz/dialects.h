/*
 * The three built-in dialects compiled into one fuzz target, each under an
 * entry name of its own (dialect-vllm.c, dialect-sglang.c,
 * dialect-llamacpp.c), created once against a host that has a clock and
 * nothing else. A target picks one by an input byte, so every target that
 * uses this fuzzes vllm, sglang and llamacpp alike.
 */
#ifndef NW_FUZZ_DIALECTS_H
#define NW_FUZZ_DIALECTS_H

#include <narwhal/plugin-abi.h>

#include <stdint.h>

struct fuzz_dialect {
	const char *name;
	const struct narwhal_dialect_ops *ops;
	void *instance;
	bool handoff; /* has the handoff trio */
};

/* The dialect byte % FUZZ_DIALECTS picks: '0' vllm, '1' sglang, '2'
 * llamacpp, '3' sglang with per-engine settings (fuzz_engines[] below:
 * one engine with its own bootstrap host and port, one aggregate). */
#define FUZZ_DIALECTS 4
const struct fuzz_dialect *fuzz_dialect_pick(uint8_t byte);

/* A fleet for the builders: two PD engines by IPv4, one by IPv6, one by
 * name that the configured sglang serves whole. */
#define FUZZ_ENGINES 4
extern const struct narwhal_engine_ref fuzz_engines[FUZZ_ENGINES];

/* The renamed entries. */
const struct narwhal_plugin_descriptor *fuzz_entry_vllm(void);
const struct narwhal_plugin_descriptor *fuzz_entry_sglang(void);
const struct narwhal_plugin_descriptor *fuzz_entry_llamacpp(void);

#endif /* NW_FUZZ_DIALECTS_H */

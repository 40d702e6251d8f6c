/*
 * Assembling a non-streamed answer from the engine's stream (spec 4.3):
 * Narwhal always streams from the engine, so the first-token and read-gap
 * timeouts hold, and a client that asked for stream:false gets the chunks
 * folded into one body. This is the pure fold: parsed SSE data payloads
 * in, the OpenAI non-streaming body out. No I/O, no global state.
 *
 * Merge rules ("non-null" means present and not JSON null; a key seen only
 * as null still appears in the output, as null):
 *
 * Top level: every key but "object", "choices" and "usage" keeps its last
 * non-null value ("id", "created", "model", "system_fingerprint", ...).
 * "object" becomes "text_completion" or "chat.completion" by route.
 * "usage" is the last non-null object; the key is left out when no chunk
 * had one.
 *
 * Choices are matched by "index" and come out sorted by it, since engines
 * interleave the choices of n > 1.
 *
 * In a choice (both routes): "logprobs" objects merge key by key, arrays
 * concatenated and other non-null values replaced, and it stays null when
 * no chunk had an object there. Every other key except "index", "text"
 * (completions) and "delta" (chat) concatenates when both old and new
 * value are arrays and otherwise keeps its last non-null value; so
 * "finish_reason" and "stop_reason" are the last non-null ones.
 *
 * Completions: "text" strings concatenate ("" when none).
 *
 * Chat: "delta" folds into "message". "role" keeps its last non-null value
 * ("assistant" when none). Other string fields (content, reasoning_content,
 * refusal, ...) concatenate; other non-null values replace. "content" is
 * null when no chunk carried it, and also when the message has tool calls
 * but its content is empty (engines send content:"" first; the
 * non-streaming body of such an answer says null). "tool_calls" elements
 * merge by their own "index" (their position in the delta when it has
 * none): "id", "type" and "function.name" are replaced by a non-empty
 * string, "function.arguments" concatenate. The output lists them sorted
 * by index as {"id","type","function":{"name","arguments"}}, with "type"
 * "function" and "arguments" "" by default and no "index"; "tool_calls" is
 * left out when there are none.
 *
 * A chunk is borrowed and never modified, but values in it may be kept by
 * reference: it must not be changed after nw_assembly_add.
 */
#ifndef NW_SERVE_ASSEMBLE_H
#define NW_SERVE_ASSEMBLE_H

#include <narwhal/plugin-abi.h>

#include <glib.h>
#include <jansson.h>

struct nw_assembly;

struct nw_assembly *nw_assembly_new(narwhal_route route);
void nw_assembly_free(struct nw_assembly *a);           /* NULL ok */

/* Merge one chunk (borrowed). 0, or -1 when it is not a JSON object, its
 * "choices" is present but not an array, or a choice is not an object or
 * has no non-negative integer "index"; a refused chunk changes nothing. */
int nw_assembly_add(struct nw_assembly *a, const json_t *chunk);

/* Merge a chunk known to equal an earlier merged one except for its text
 * (completions "text", chat "content") of choice index: the text is
 * appended and the chunk counted (chunk-shape.h finds such chunks). -1,
 * changing nothing, when the choice has no such text yet. */
int nw_assembly_add_text(struct nw_assembly *a, json_int_t index, const char *text, size_t len);

/* Give choice index's key (a finish or stop reason of a chunk merged by
 * nw_assembly_add_text) the non-null value v (a new reference, taken), as
 * merging that chunk whole would. -1 when there is no such choice. */
int nw_assembly_set_reason(struct nw_assembly *a, json_int_t index, const char *key, json_t *v);

/* Number of chunks merged so far. */
unsigned nw_assembly_chunks(const struct nw_assembly *a);

/* Append the non-streaming body, compact JSON, to out. Does not consume
 * the assembly; merging may go on after. */
void nw_assembly_write(const struct nw_assembly *a, GString *out);

/* The last usage object merged (borrowed), or NULL. */
const json_t *nw_assembly_usage(const struct nw_assembly *a);

#endif

/*
 * Prompts of an exact length, as the engine counts them (docs/profiles.md,
 * "How to profile a fleet"): a nonce unique to the run and the prompt, so
 * that no engine serves any of it from a prefix cache, then a filler word
 * repeated. The engine's own tokenise call (through the dialect) confirms
 * the count; when it differs, the number of fillers is corrected by the
 * secant through the last two counts and the prompt counted again, a few
 * times at most. What is learnt of the tokeniser (tokens per filler, the
 * nonce's tokens) makes the next prompt right the first time.
 */
#include "build-config.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "tools/profile/run.h"

#define FILLER " the"
#define TRIES_MAX 6

struct build {
	struct nw_prof_run *run;
	struct nw_prof_engine *e;
	uint64_t want;
	char *nonce;
	char *text;
	int64_t fillers;
	int64_t prev_fillers;       /* the last try, -1: none */
	uint64_t prev_count;
	unsigned tries;
	nw_prof_prompt_fn fn;
	void *data;
};

static void
finish(struct build *b, bool ok, double seconds, const char *error)
{
	char *text = ok ? g_steal_pointer(&b->text) : NULL;

	b->fn(b->data, ok, text, seconds, error);
	g_free(b->text);
	g_free(b->nonce);
	g_free(b);
}

static void G_GNUC_PRINTF(2, 3)
fail(struct build *b, const char *fmt, ...)
{
	g_autofree char *msg = NULL;
	va_list ap;

	va_start(ap, fmt);
	msg = g_strdup_vprintf(fmt, ap);
	va_end(ap);
	finish(b, false, 0, msg);
}

static void send_count(struct build *b);

/* Learn from a count that came out right: the fillers' tokens from the
 * last two tries when they differ, the nonce's from this one. */
static void
learn(struct build *b, uint64_t count)
{
	struct nw_prof_engine *e = b->e;

	if (b->prev_fillers >= 0 && b->prev_fillers != b->fillers) {
		double slope = ((double)count - (double)b->prev_count) /
		               (double)(b->fillers - b->prev_fillers);

		if (slope > 0)
			e->tokens_per_filler = slope;
	}
	e->prompt_overhead = (double)count - e->tokens_per_filler * (double)b->fillers;
}

static void
counted(void *data, const struct nw_dialect_answer *a)
{
	struct build *b = data;
	struct nw_prof_engine *e = b->e;
	const struct nw_dialect *d = e->d;
	const struct nw_config *cfg = b->run->cfg;
	json_t *doc;
	uint64_t count = 0;
	double slope;
	int64_t next;
	int rc;

	if (!nw_prof_answered_2xx(a)) {
		g_autofree char *problem = nw_dialect_answer_problem(d, a, "engine.tokenize_timeout_s",
		                                                     cfg->engine.tokenize_timeout_s);

		fail(b, "tokenize: %s", problem);
		return;
	}
	doc = json_loadb(a->body->str, a->body->len, 0, NULL);
	rc = doc != NULL ? d->ops->parse_tokenize(d->ctx, doc, &count) : -EINVAL;
	json_decref(doc);
	if (rc != 0) {
		fail(b, "dialect %s cannot read the engine's token count", d->name);
		return;
	}
	if (count == b->want) {
		learn(b, count);
		finish(b, true, a->seconds, NULL);
		return;
	}
	if (++b->tries >= TRIES_MAX) {
		fail(b, "no prompt of exactly %" G_GUINT64_FORMAT " tokens after %u tries (the "
		     "last had %" G_GUINT64_FORMAT ")", b->want, b->tries, count);
		return;
	}
	slope = e->tokens_per_filler;
	if (b->prev_fillers >= 0 && b->prev_fillers != b->fillers && count != b->prev_count)
		slope = ((double)count - (double)b->prev_count) / (double)(b->fillers - b->prev_fillers);
	if (!(slope > 0))
		slope = 1.0;
	next = b->fillers + (int64_t)llround(((double)b->want - (double)count) / slope);
	if (next == b->fillers)
		next += b->want > count ? 1 : -1;
	if (next < 0) {
		fail(b, "the engine counts %" G_GUINT64_FORMAT " tokens in the shortest prompt "
		     "narwhal-profile makes, more than %" G_GUINT64_FORMAT, count, b->want);
		return;
	}
	b->prev_fillers = b->fillers;
	b->prev_count = count;
	b->fillers = next;
	send_count(b);
}

static void
send_count(struct build *b)
{
	struct nw_prof_engine *e = b->e;
	const struct nw_dialect *d = e->d;
	GString *text = g_string_new(b->nonce);
	struct narwhal_http_call call = { .struct_size = sizeof call };
	struct narwhal_dialect_target target = {
		.struct_size = sizeof target, .request = b->run->next_handle,
		.request_id = "narwhal-profile-tokenize", .route = NARWHAL_ROUTE_COMPLETIONS,
		.engine = &d->ref,
	};
	json_t *body;
	int rc;

	for (int64_t i = 0; i < b->fillers; i++)
		g_string_append(text, FILLER);
	g_free(b->text);
	b->text = g_string_free(text, FALSE);
	body = json_pack("{s:s, s:s}", "prompt", b->text, "model", e->model);
	target.client_body = body;
	rc = d->ops->build_tokenize(d->ctx, &target, &call);
	json_decref(body);
	if (rc == 0 && (call.path == NULL || call.path[0] != '/'))
		rc = -EINVAL;
	if (rc != 0) {
		json_decref(call.body);
		fail(b, "dialect %s: build_tokenize failed (%s): narwhal-profile needs the "
		     "engine's token count", d->name, g_strerror(-rc));
		return;
	}
	if (nw_prof_call(b->run, d, &call, b->run->cfg->engine.tokenize_timeout_s, counted,
	                 b) == NULL)
		fail(b, "tokenize: the call could not start");
}

void
nw_prof_prompt_build(struct nw_prof_run *run, struct nw_prof_engine *e, uint64_t tokens,
                     nw_prof_prompt_fn fn, void *data)
{
	struct build *b = g_new0(struct build, 1);
	double guess;

	b->run = run;
	b->e = e;
	b->want = tokens;
	b->fn = fn;
	b->data = data;
	b->prev_fillers = -1;
	/* Five hex digits of the counter: unique among the run's prompts. */
	b->nonce = g_strdup_printf("%08x%05x:", run->tag, (unsigned)(run->next_prompt++ & 0xfffff));
	guess = ((double)tokens - e->prompt_overhead) / e->tokens_per_filler;
	b->fillers = guess > 0 ? (int64_t)llround(guess) : 0;
	if (e->d->ops->build_tokenize == NULL) {
		fail(b, "dialect %s cannot count tokens: narwhal-profile needs the engine's token "
		     "count to make prompts of exact lengths", e->d->name);
		return;
	}
	send_count(b);
}

struct prompt_wait {
	bool done;
	char *text;
	double seconds;
	char *error;
};

static void
waited(void *data, bool ok, char *text, double seconds, const char *error)
{
	struct prompt_wait *w = data;

	w->text = text;
	w->seconds = seconds;
	w->error = ok ? NULL : g_strdup(error);
	w->done = true;
}

char *
nw_prof_prompt_wait(struct nw_prof_run *run, struct nw_prof_engine *e, uint64_t tokens,
                    double *seconds)
{
	struct prompt_wait w = { .done = false };

	nw_prof_prompt_build(run, e, tokens, waited, &w);
	nw_prof_wait(&w.done);
	if (w.error != NULL) {
		nw_prof_fail(e, "a prompt of %" G_GUINT64_FORMAT " tokens: %s", tokens, w.error);
		g_free(w.error);
		return NULL;
	}
	*seconds = w.seconds;
	return w.text;
}

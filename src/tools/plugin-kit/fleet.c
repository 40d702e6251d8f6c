/* The plugin test kit's scripted fleet (include/narwhal/plugin-test.h). */
#include "build-config.h"

#include <narwhal/plugin-test.h>

#include <math.h>

struct narwhal_test_fleet {
	struct narwhal_fleet_view view;
	GArray *engines;  /* struct narwhal_engine_view */
	GPtrArray *ids;   /* char *, owned: the engines' id strings */
	GArray *eligible; /* uint32_t, the last narwhal_test_fleet_eligible answer */
};

struct narwhal_test_fleet *
narwhal_test_fleet_new(double ttft_target_s, double tpot_target_s)
{
	struct narwhal_test_fleet *f = g_new0(struct narwhal_test_fleet, 1);

	f->engines = g_array_new(FALSE, TRUE, sizeof(struct narwhal_engine_view));
	f->ids = g_ptr_array_new_with_free_func(g_free);
	f->eligible = g_array_new(FALSE, FALSE, sizeof(uint32_t));
	f->view = (struct narwhal_fleet_view){
		.struct_size = sizeof f->view,
		.engine_view_size = sizeof(struct narwhal_engine_view),
		.ttft_target_s = ttft_target_s,
		.tpot_target_s = tpot_target_s,
	};
	return f;
}

void
narwhal_test_fleet_free(struct narwhal_test_fleet *f)
{
	if (f == NULL)
		return;
	g_array_unref(f->engines);
	g_ptr_array_unref(f->ids);
	g_array_unref(f->eligible);
	g_free(f);
}

struct narwhal_engine_view *
narwhal_test_fleet_add(struct narwhal_test_fleet *f, const char *id, narwhal_role role)
{
	char *copy = g_strdup(id);
	struct narwhal_engine_view e = {
		.struct_size = sizeof e,
		.index = f->engines->len,
		.id = copy,
		.role = role,
		.flags = NARWHAL_ENGINE_AVAILABLE,
		.prefill_load = NAN,
		.decode_load = NAN,
	};

	g_ptr_array_add(f->ids, copy);
	g_array_append_val(f->engines, e);
	return narwhal_test_fleet_engine(f, e.index);
}

struct narwhal_engine_view *
narwhal_test_fleet_engine(struct narwhal_test_fleet *f, uint32_t i)
{
	if (i >= f->engines->len)
		return NULL;
	return &g_array_index(f->engines, struct narwhal_engine_view, i);
}

const struct narwhal_fleet_view *
narwhal_test_fleet_view(struct narwhal_test_fleet *f)
{
	/* The array may have moved since the last add. */
	f->view.n_engines = f->engines->len;
	f->view.engines = (const struct narwhal_engine_view *)(void *)f->engines->data;
	return &f->view;
}

const uint32_t *
narwhal_test_fleet_eligible(struct narwhal_test_fleet *f, narwhal_role role, uint32_t *n)
{
	g_array_set_size(f->eligible, 0);
	for (uint32_t i = 0; i < f->engines->len; i++) {
		if (role == 0 || narwhal_test_fleet_engine(f, i)->role == role)
			g_array_append_val(f->eligible, i);
	}
	*n = f->eligible->len;
	return (const uint32_t *)(void *)f->eligible->data;
}

/*
 * Reading a file whole, only if it is a regular file (regular-file.c).
 * The configuration and the profile store are read on a reload, on the
 * daemon's loop: a named pipe there would stall it until something wrote
 * to it, and a device such as /dev/zero would never end. Callers word
 * their own messages from what the read found.
 */
#ifndef NW_CORE_REGULAR_FILE_H
#define NW_CORE_REGULAR_FILE_H

#include <stdbool.h>
#include <stddef.h>

#include <glib.h>

typedef enum {
	NW_FILE_READ_OK,
	NW_FILE_OPEN_FAILED,  /* errno_value says why */
	NW_FILE_NOT_REGULAR,  /* a directory (is_dir), a pipe, socket or device */
	NW_FILE_TOO_LARGE,    /* over max_bytes */
	NW_FILE_READ_FAILED,  /* errno_value says why */
} nw_file_read_result;

struct nw_file_read {
	nw_file_read_result result;
	int errno_value;
	bool is_dir;
};

/* The file's bytes (NUL-terminated one past the end, so text may be read
 * as a string too), or NULL with *how saying why. The file is opened
 * without blocking and checked before any read. */
GBytes *nw_regular_file_read(const char *file, size_t max_bytes, struct nw_file_read *how);

#endif /* NW_CORE_REGULAR_FILE_H */

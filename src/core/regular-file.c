#include "build-config.h"

#include "core/regular-file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

GBytes *
nw_regular_file_read(const char *file, size_t max_bytes, struct nw_file_read *how)
{
	struct stat st = { 0 };
	GString *buf;
	char chunk[8192];
	ssize_t n;
	int fd = open(file, O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	*how = (struct nw_file_read){ .result = NW_FILE_READ_OK };
	if (fd < 0) {
		how->result = NW_FILE_OPEN_FAILED;
		how->errno_value = errno;
		return NULL;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		how->result = NW_FILE_NOT_REGULAR;
		how->is_dir = S_ISDIR(st.st_mode);
		close(fd);
		return NULL;
	}
	buf = g_string_new(NULL);
	while ((n = read(fd, chunk, sizeof chunk)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			how->result = NW_FILE_READ_FAILED;
			how->errno_value = errno;
			break;
		}
		/* The file may grow after the fstat: the cap holds on what is read. */
		if (buf->len + (size_t)n > max_bytes) {
			how->result = NW_FILE_TOO_LARGE;
			break;
		}
		g_string_append_len(buf, chunk, n);
	}
	close(fd);
	if (how->result != NW_FILE_READ_OK) {
		g_string_free(buf, TRUE);
		return NULL;
	}
	return g_string_free_to_bytes(buf);
}

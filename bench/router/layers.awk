# The CPU of one profiled cell split by layer, from
#   perf report --stdio --no-children --sort dso,sym -g none -i perf-TAG.data
# Prints one tab-separated line of percentages of the cell's samples:
#   kernel syscall http_server main_loop malloc libc_other jansson own
# (bench/router/README.md, "What the decided stack costs by itself").
#
# kernel       the kernel's work for the process ([kernel.kallsyms])
# syscall      the C library's system-call stubs and the vDSO: the samples
#              that land on a stub are mostly the return from the kernel
# http_server  libmicrohttpd (the client side, architecture section 3)
# main_loop    GLib (the one main loop, timers, strings)
# malloc       the C library's allocator
# libc_other   the rest of the C library (memset, memcpy, strlen, printf...)
# jansson      JSON trees
# own          the proxy's own binary and its plugins (nginx: nginx itself)
#
# The first four are the "fixed stack": a proxy built as the architecture
# decides pays them whatever its own code does. The shares of the C library
# that the stack calls (libmicrohttpd's memset of its pool, say) are counted
# as libc_other, so the fixed stack is if anything understated.
BEGIN {
	split("kernel syscall http_server main_loop malloc libc_other jansson own", names, " ")
	stubs = "^(__libc_recv|__libc_recvfrom|recv|recvfrom|__libc_send|__libc_sendmsg|sendmsg|send" \
		"|__GI___writev|writev|__GI___readv|readv|epoll_wait|epoll_ctl|__poll|poll|ppoll" \
		"|__getsockopt|getsockopt|__setsockopt|setsockopt|accept4|__libc_accept4" \
		"|__close|close|__GI___close|__GI___close_nocancel|read|__libc_read|__GI___libc_read" \
		"|write|__libc_write|__GI___libc_write|clock_gettime.*|__clock_gettime.*" \
		"|eventfd_read|eventfd_write|__GI___pthread_enable_asynccancel" \
		"|__GI___pthread_disable_asynccancel)$"
}
/^#/ || NF < 4 { next }
{
	p = $1
	if (p !~ /%$/) next
	sub(/%$/, "", p)
	dso = $2
	sym = $4
	if (dso ~ /^\[kernel/)
		l = "kernel"
	else if (dso == "[vdso]" || (dso ~ /^libc\.so/ && sym ~ stubs))
		l = "syscall"
	else if (dso ~ /^libmicrohttpd/)
		l = "http_server"
	else if (dso ~ /^libglib/)
		l = "main_loop"
	else if (dso ~ /^libc\.so/ && sym ~ /malloc|free|alloc|unlink_chunk|consolidate|tcache/)
		l = "malloc"
	else if (dso ~ /^libc\.so/)
		l = "libc_other"
	else if (dso ~ /^libjansson/)
		l = "jansson"
	else
		l = "own"
	share[l] += p
	total += p
}
END {
	if (total <= 0)
		exit 1
	line = ""
	for (i = 1; i <= 8; i++)
		line = line (i > 1 ? "\t" : "") sprintf("%.2f", share[names[i]] * 100 / total)
	print line
}

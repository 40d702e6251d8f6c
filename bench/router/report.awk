# Tables of a bench/router/run.sh run, from its raw.tsv (markdown on stdout).
#
#   awk -f bench/router/report.awk raw.tsv      (or run.sh --report raw.tsv)
#
# Every figure is the median over the runs whose cell is valid. A ratio
# "x nginx" is computed inside each run (target / nginx of the same run,
# same mode and concurrency) and the median of those per-run ratios is shown,
# so that the machine's drift between runs cancels. Added latency is the
# target's percentile minus direct's in the same run.
BEGIN {
	FS = "\t"
	hz = 100; tok["ns"] = 16; tok["sse"] = 200; tok["paced"] = 16; paced_rps = 2000
	T1_US = 200; T2_RATIO = 0.7; T3_EVENTS = 100000
	# issue 15
	T4_BODY_RATIO = 1.5; T5_DISAGG_RATIO = 2.5; T6_DISAGG_US = 250; T7_STREAMS_MB = 40
}

/^#/ {
	for (i = 1; i <= split(substr($0, 2), kv, " "); i++) {
		split(kv[i], p, "=")
		if (p[1] == "hz") hz = p[2]
		if (p[1] == "ns_tokens") tok["ns"] = tok["paced"] = p[2]
		if (p[1] == "paced_rps") paced_rps = p[2]
		if (p[1] == "sse_tokens") tok["sse"] = p[2]
	}
	next
}
$1 == "run" { next }

{
	r = $1; m = $2; c = $3; t = $4
	if (!(m in seen_m)) { seen_m[m] = 1; modes[++nm] = m }
	if (!((m, c) in seen_c)) { seen_c[m, c] = 1; cs[m, ++nc[m]] = c }
	if (!(t in seen_t)) { seen_t[t] = 1; tg[++nt] = t }
	if (r > nruns) nruns = r
	k = m SUBSEP c SUBSEP t SUBSEP r
	row[k] = $0
	present[k] = 1
	if ($17 != "yes") next
	ok[k] = 1
	rps[k] = $5; p50[k] = $8; p99[k] = $9
	if ($6 > 0) {
		cpu1k[k] = $13 / hz / $6 * 1000
		sim1k[k] = $14 / hz / $6 * 1000
	}
	cpupct[k] = $13 / hz / $7 * 100
	rss[k] = $15 / 1024; hwm[k] = $16 / 1024
}

function fmt_us(us,   a) {
	if (us == "") return "—"
	a = us < 0 ? -us : us
	if (a >= 1e6) return sprintf("%.2f s", us / 1e6)
	if (a >= 1e4) return sprintf("%.1f ms", us / 1e3)
	if (a >= 1e3) return sprintf("%.2f ms", us / 1e3)
	return sprintf("%.0f µs", us)
}
function fmt_add(us) { return us == "" ? "—" : (us >= 0 ? "+" : "−") fmt_us(us >= 0 ? us : -us) }
function fmt_x(x) { return x == "" ? "—" : sprintf("%.2f×", x) }
function fmt_n(x) { return x == "" ? "—" : x >= 100 ? sprintf("%.0f", x) : x >= 10 ? sprintf("%.1f", x) : sprintf("%.2f", x) }
function fmt_k(x) { return x == "" ? "—" : x >= 1e6 ? sprintf("%.2fM", x / 1e6) : x >= 1e4 ? sprintf("%.1fk", x / 1e3) : sprintf("%.0f", x) }

# median of v[1..n]; "" when n == 0
function median(v, n,   i, j, x) {
	if (n == 0) return ""
	for (i = 2; i <= n; i++) {
		x = v[i]
		for (j = i - 1; j >= 1 && v[j] > x; j--) v[j + 1] = v[j]
		v[j + 1] = x
	}
	return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}

# Median over runs of one metric of (m, c, t): what = value name.
function med(what, m, c, t,   r, k, n, v, x) {
	n = 0
	for (r = 1; r <= nruns; r++) {
		k = m SUBSEP c SUBSEP t SUBSEP r
		if (!(k in ok)) continue
		x = val(what, m, c, t, r)
		if (x != "") v[++n] = x
	}
	return median(v, n)
}
function nvalid(m, c, t,   r, n) {
	n = 0
	for (r = 1; r <= nruns; r++) if ((m SUBSEP c SUBSEP t SUBSEP r) in ok) n++
	return n
}

# One value of one run; the derived ones need direct and/or nginx of the
# same run to be valid too.
function val(what, m, c, t, r,   k, kd, kn, kb, a, b, lim) {
	k = m SUBSEP c SUBSEP t SUBSEP r
	kd = m SUBSEP c SUBSEP "direct" SUBSEP r
	kn = m SUBSEP c SUBSEP "nginx" SUBSEP r
	if (!(k in ok)) return ""
	if (what == "rps") return rps[k]
	if (what == "ev") return rps[k] * tok[m]
	if (what == "p50") return p50[k]
	if (what == "p99") return p99[k]
	if (what == "cpu1k") return t == "direct" ? "" : cpu1k[k]
	if (what == "sim1k") return sim1k[k]
	if (what == "cpupct") return t == "direct" ? "" : cpupct[k]
	if (what == "reqcpus") return (t == "direct" || cpu1k[k] == 0) ? "" : 1000 / cpu1k[k]
	if (what == "evcpus") return (t == "direct" || cpu1k[k] == 0) ? "" : 1000 / cpu1k[k] * tok[m]
	if (what == "rss") return t == "direct" ? "" : rss[k]
	if (what == "hwm") return t == "direct" ? "" : hwm[k]
	if (what == "add50" || what == "add99") {
		if (t == "direct" || !(kd in ok)) return ""
		return what == "add50" ? p50[k] - p50[kd] : p99[k] - p99[kd]
	}
	# CPU per request against narwhal-body of the same run
	if (what == "x_body_cpu1k") {
		kb = m SUBSEP c SUBSEP "narwhal-body" SUBSEP r
		return (t == "direct" || !(kb in ok) || cpu1k[kb] == 0) ? "" : cpu1k[k] / cpu1k[kb]
	}
	# ratios against nginx of the same run
	if (t == "direct" || !(kn in ok)) return ""
	if (what == "x_rps") return rps[kn] > 0 ? rps[k] / rps[kn] : ""
	if (what == "x_cpu1k") return cpu1k[kn] > 0 ? cpu1k[k] / cpu1k[kn] : ""
	if (what == "x_reqcpus") return cpu1k[k] > 0 ? cpu1k[kn] / cpu1k[k] : ""
	if (what == "x_rss") return rss[kn] > 0 ? rss[k] / rss[kn] : ""
	if (what == "x_hwm") return hwm[kn] > 0 ? hwm[k] / hwm[kn] : ""
	if (what == "x_p50") return p50[kn] > 0 ? p50[k] / p50[kn] : ""
	if (what == "x_p99") return p99[kn] > 0 ? p99[k] / p99[kn] : ""
	if (what == "x_add50" || what == "x_add99") {
		if (!(kd in ok)) return ""
		a = what == "x_add50" ? p50[k] - p50[kd] : p99[k] - p99[kd]
		b = what == "x_add50" ? p50[kn] - p50[kd] : p99[kn] - p99[kd]
		# nginx's own added latency must stand out of the noise (20 µs, or 5%
		# of direct's percentile) for a ratio to mean anything.
		lim = what == "x_add50" ? p50[kd] : p99[kd]
		return b > 20 && b > 0.05 * lim ? a / b : ""
	}
	return ""
}

function label(t) {
	if (t == "narwhal") return "narwhal (1 engine, aggregate)"
	if (t == "narwhal-body") return "narwhal-body (1 engine, aggregate, engine.stream_decode false)"
	if (t == "narwhal-tok") return "narwhal (1 engine, aggregate, +tokenize call)"
	if (t == "narwhal-disagg") return "narwhal-disagg (2 engines: prefill + decode) †"
	return t
}

END {
	for (i = 1; i <= nm; i++) {
		m = modes[i]
		if (m == "ns") print "### Non-streaming (`max_tokens` " tok[m] ", `stream: false`)\n"
		else if (m == "paced") print "### Non-streaming, paced (`max_tokens` " tok[m] ", `stream: false`, each connection waiting c × 1000 / " paced_rps " ms before each request, so every target serves about the same rate)\n"
		else print "### Streaming (`max_tokens` " tok[m] ", `stream: true`: " tok[m] " token events + `[DONE]` per response)\n"
		print "Throughput and latency (medians over valid runs; ×nginx = median of per-run ratios):\n"
		if (m == "sse") {
			print "| c | target | req/s | relayed events/s | ×nginx | p50 | p99 | added p50 | ×nginx | added p99 | ×nginx | valid runs |"
			print "|---|---|---|---|---|---|---|---|---|---|---|---|"
		} else {
			print "| c | target | req/s | ×nginx | p50 | p99 | added p50 | ×nginx | added p99 | ×nginx | valid runs |"
			print "|---|---|---|---|---|---|---|---|---|---|---|"
		}
		for (j = 1; j <= nc[m]; j++) {
			c = cs[m, j]
			for (q = 1; q <= nt; q++) {
				t = tg[q]
				line = "| " c " | " label(t) " | " fmt_k(med("rps", m, c, t))
				if (m == "sse") line = line " | " fmt_k(med("ev", m, c, t))
				line = line " | " fmt_x(med("x_rps", m, c, t)) " | " fmt_us(med("p50", m, c, t)) " | " fmt_us(med("p99", m, c, t))
				line = line " | " fmt_add(med("add50", m, c, t)) " | " fmt_x(med("x_add50", m, c, t))
				line = line " | " fmt_add(med("add99", m, c, t)) " | " fmt_x(med("x_add99", m, c, t))
				line = line " | " nvalid(m, c, t) "/" nruns " |"
				print line
			}
		}
		print "\nCost of the proxy process (CPU from /proc/<pid>/stat utime+stime around each cell; RSS = VmRSS after the cell, peak = VmHWM; nginx = master + worker):\n"
		print "| c | target | CPU s / 1k req | ×nginx | proxy CPU use | req per CPU-s | ×nginx | " (m == "sse" ? "events per CPU-s | " : "") "sim CPU s / 1k req | RSS MB | ×nginx | peak RSS MB | ×nginx |"
		print "|---|---|---|---|---|---|---|" (m == "sse" ? "---|" : "") "---|---|---|---|---|"
		for (j = 1; j <= nc[m]; j++) {
			c = cs[m, j]
			for (q = 1; q <= nt; q++) {
				t = tg[q]
				x = med("cpupct", m, c, t)
				line = "| " c " | " label(t) " | " fmt_n(med("cpu1k", m, c, t)) " | " fmt_x(med("x_cpu1k", m, c, t))
				line = line " | " (x == "" ? "—" : sprintf("%.0f%%", x)) " | " fmt_k(med("reqcpus", m, c, t)) " | " fmt_x(med("x_reqcpus", m, c, t))
				if (m == "sse") line = line " | " fmt_k(med("evcpus", m, c, t))
				line = line " | " fmt_n(med("sim1k", m, c, t)) " | " fmt_n(med("rss", m, c, t)) " | " fmt_x(med("x_rss", m, c, t))
				line = line " | " fmt_n(med("hwm", m, c, t)) " | " fmt_x(med("x_hwm", m, c, t)) " |"
				print line
			}
		}
		print ""
	}
	if ("narwhal-disagg" in seen_t) print "† narwhal-disagg makes two engine calls per request (prefill on one engine, decode on the other, which pulls the KV from the first inside the simulator); it is not comparable one-to-one with nginx and is shown for its own cost.\n"

	# --- targets
	print "### Targets (issue 4)\n"
	print "| target | figure | measured (median) | verdict |"
	print "|---|---|---|---|"
	b = med("add50", "ns", 1, "nginx")
	for (q = 1; q <= 2; q++) {
		t = q == 1 ? "narwhal" : "narwhal-body"
		if (!((t) in seen_t)) continue
		a = med("add50", "ns", 1, t)
		print "| added p50 at c=1 ≤ 200 µs | " t ", non-streaming, c=1, p50 − direct p50 (nginx: " fmt_add(b) ") | " fmt_add(a) " | " (a == "" ? "no data" : a <= T1_US ? "**met**" : "**missed**") " |"
	}
	a = med("add50", "sse", 1, "narwhal")
	if (a != "") print "| added p50 at c=1 ≤ 200 µs | narwhal, 200-token stream, c=1 (nginx " fmt_add(med("add50", "sse", 1, "nginx")) ") | " fmt_add(a) " | " (a <= T1_US ? "**met**" : "**missed**") " |"
	for (q = 1; q <= 2; q++) {
		t = q == 1 ? "narwhal" : "narwhal-body"
		if (!((t) in seen_t)) continue
		for (j = 1; j <= nc["ns"]; j++) {
			c = cs["ns", j]
			if (c < 64) continue
			x = med("x_reqcpus", "ns", c, t); y = med("x_rps", "ns", c, t)
			print "| req/s per core ≥ 0.7× nginx | " t ", non-streaming c=" c ": requests per proxy CPU-second ×nginx (raw req/s ×nginx: " fmt_x(y) ") | " fmt_x(x) " | " (x == "" ? "no data" : x >= T2_RATIO ? "**met**" : "**missed**") " |"
		}
	}
	for (j = 1; j <= nc["sse"]; j++) {
		c = cs["sse", j]
		if (c < 64) continue
		x = med("x_reqcpus", "sse", c, "narwhal"); y = med("x_rps", "sse", c, "narwhal")
		print "| req/s per core ≥ 0.7× nginx | narwhal, streaming c=" c ": requests per proxy CPU-second ×nginx (raw req/s ×nginx: " fmt_x(y) ") | " fmt_x(x) " | " (x == "" ? "no data" : x >= T2_RATIO ? "**met**" : "**missed**") " |"
	}
	best = ""; bestc = ""
	for (j = 1; j <= nc["sse"]; j++) {
		c = cs["sse", j]
		x = med("ev", "sse", c, "narwhal")
		if (x != "" && (best == "" || x > best)) { best = x; bestc = c }
	}
	if (best != "") {
		cap = med("evcpus", "sse", bestc, "narwhal")
		pct = med("cpupct", "sse", bestc, "narwhal")
		d = med("ev", "sse", bestc, "direct")
		v = best >= T3_EVENTS ? "**met**" : (cap != "" && cap >= T3_EVENTS ? "not reached: the upstream (simulator sharing a core with wrk) is the limit; per CPU-second it is met" : "**missed**")
		print "| ≥ 100,000 relayed SSE events/s on one core | narwhal, best concurrency (c=" bestc "), proxy CPU " sprintf("%.0f%%", pct) ", direct " fmt_k(d) " events/s; events per proxy CPU-second " fmt_k(cap) " | " fmt_k(best) " events/s | " v " |"
	} else print "| ≥ 100,000 relayed SSE events/s on one core | | no data | no data |"
	print ""
	targets_issue_15()

	# --- individual runs
	print "### Individual runs\n"
	print "| run | mode | c | target | req/s | p50 | p99 | CPU s / 1k req | proxy CPU | RSS MB | valid | note |"
	print "|---|---|---|---|---|---|---|---|---|---|---|---|"
	for (i = 1; i <= nm; i++) {
		m = modes[i]
		for (j = 1; j <= nc[m]; j++) {
			c = cs[m, j]
			for (q = 1; q <= nt; q++) {
				t = tg[q]
				for (r = 1; r <= nruns; r++) {
					k = m SUBSEP c SUBSEP t SUBSEP r
					if (!(k in present)) continue
					split(row[k], f, "\t")
					cpu = (t == "direct" || f[6] == 0) ? "—" : sprintf("%.3f", f[13] / hz / f[6] * 1000)
					pc = t == "direct" ? "—" : sprintf("%.0f%%", f[13] / hz / f[7] * 100)
					rs = t == "direct" ? "—" : sprintf("%.1f", f[15] / 1024)
					inv = f[17] == "yes" ? "yes" : sprintf("**no** (errors %d, non-2xx %d, bad %d)", f[10], f[11], f[12])
					print "| " r " | " m " | " c " | " t " | " fmt_k(f[5]) " | " fmt_us(f[8]) " | " fmt_us(f[9]) " | " cpu " | " pc " | " rs " | " inv " | " f[18] " |"
				}
			}
		}
	}
}

# The figures issue 15 sets: the default (assembled) path against the
# like-for-like one, the two-leg path against nginx, and memory with many
# streams (the soak, bench/soak, has memory over time).
function targets_issue_15(   j, c, x, a) {
	print "### Targets (issue 15)\n"
	print "| target | figure | measured (median) | verdict |"
	print "|---|---|---|---|"
	if (("narwhal" in seen_t) && ("narwhal-body" in seen_t))
		cpu_ratio_rows("assembled decode stream ≤ 1.5× like-for-like CPU", "narwhal ÷ narwhal-body, CPU per request",
		               "x_body_cpu1k", "narwhal", T4_BODY_RATIO)
	if ("narwhal-disagg" in seen_t) {
		cpu_ratio_rows("two-leg request ≤ 2.5× nginx's CPU per request", "narwhal-disagg, CPU per request ×nginx",
		               "x_cpu1k", "narwhal-disagg", T5_DISAGG_RATIO)
		a = med("add50", "ns", 1, "narwhal-disagg")
		if (("ns", 1) in seen_c)
			print "| two-leg added p50 at c=1 ≤ 250 µs | narwhal-disagg, non-streaming, c=1, p50 − direct p50 (nginx: " fmt_add(med("add50", "ns", 1, "nginx")) ") | " fmt_add(a) " | " (a == "" ? "no data" : a <= T6_DISAGG_US ? "**met**" : "**missed**") " |"
	}
	for (j = 1; j <= nc["sse"]; j++) {
		c = cs["sse", j]
		if (c < 512 || !("narwhal" in seen_t)) continue
		x = med("hwm", "sse", c, "narwhal")
		print "| ≤ 40 MB RSS with 512 open streams | narwhal, peak RSS over the streaming c=" c " cell (nginx: " fmt_n(med("hwm", "sse", c, "nginx")) " MB; after the streams end and over 30 minutes: bench/soak) | " (x == "" ? "—" : fmt_n(x) " MB") " | " (x == "" ? "no data" : x <= T7_STREAMS_MB ? "**met**" : "**missed**") " |"
	}
	print ""
}

# One row per non-streaming cell (plain, then paced) at c ≥ 64: the median
# of ratio `what` of target t against limit.
function cpu_ratio_rows(goal, figure, what, t, limit,   k, m, j, c, x) {
	for (k = 1; k <= 2; k++) {
		m = k == 1 ? "ns" : "paced"
		for (j = 1; j <= nc[m]; j++) {
			c = cs[m, j]
			if (c < 64) continue
			x = med(what, m, c, t)
			print "| " goal " | " figure ", " (m == "paced" ? "paced, " : "") "non-streaming c=" c " | " fmt_x(x) " | " (x == "" ? "no data" : x <= limit ? "**met**" : "**missed**") " |"
		}
	}
}

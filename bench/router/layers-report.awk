# Tables of a PERF=layers run of bench/router/run.sh (markdown on stdout):
# each proxy's CPU per request split by layer (bench/router/layers.awk).
#
#   awk -f bench/router/layers-report.awk OUT/raw.tsv OUT/layers.tsv
#   (or run.sh --layers OUT)
#
# Figures are µs of the proxy's CPU per request: the cell's CPU per request
# (raw.tsv) times the layer's share of the cell's samples. Every figure and
# ratio is the median over the runs whose cell is valid; a ratio is taken
# inside each run first, as in report.awk. "fixed" is the fixed stack:
# kernel + syscall + http_server + main_loop.
BEGIN {
	FS = "\t"
	hz = 100
	nl = split("kernel syscall http_server main_loop malloc libc_other jansson own", lname, " ")
}
FNR == 1 { file++ }
file == 1 && /^#/ {
	for (i = 1; i <= split(substr($0, 2), kv, " "); i++) {
		split(kv[i], p, "=")
		if (p[1] == "hz") hz = p[2]
	}
	next
}
file == 1 && $1 == "run" { next }
file == 1 {
	if ($17 == "yes" && $6 > 0)
		cpu[$2, $3, $4, $1] = $13 / hz / $6 * 1e6
	next
}
file == 2 {
	r = $1; m = $2; c = $3; t = $4
	if (!((m, c, t, r) in cpu)) next
	if (!(m in seen_m)) { seen_m[m] = 1; modes[++nm] = m }
	if (!((m, c) in seen_c)) { seen_c[m, c] = 1; cs[m, ++nc[m]] = c }
	if (!(t in seen_t)) { seen_t[t] = 1; tg[++nt] = t }
	if (r > nruns) nruns = r
	have[m, c, t, r] = 1
	fixed = 0
	for (i = 1; i <= nl; i++) {
		us[m, c, t, r, i] = cpu[m, c, t, r] * $(4 + i) / 100
		if (i <= 4) fixed += us[m, c, t, r, i]
	}
	fix[m, c, t, r] = fixed
}

function median(v, n,    i, j, x) {
	for (i = 2; i <= n; i++) {
		x = v[i]
		for (j = i - 1; j >= 1 && v[j] > x; j--) v[j + 1] = v[j]
		v[j + 1] = x
	}
	if (n == 0) return ""
	return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}

# median over runs of a per-run quantity: kind "cpu", "fix", a layer
# number, or "fix/nginx", "fix/narwhal-body"
function over_runs(m, c, t, kind,    r, n, v, base) {
	n = 0
	for (r = 1; r <= nruns; r++) {
		if (!((m, c, t, r) in have)) continue
		if (kind == "cpu") v[++n] = cpu[m, c, t, r]
		else if (kind == "fix") v[++n] = fix[m, c, t, r]
		else if (kind ~ /^fix\//) {
			base = substr(kind, 5)
			if (!((m, c, base, r) in have)) continue
			v[++n] = fix[m, c, t, r] / cpu[m, c, base, r]
		} else v[++n] = us[m, c, t, r, kind]
	}
	return median(v, n)
}

function num(x, f) { return x == "" ? "—" : sprintf(f, x) }

END {
	for (a = 1; a <= nm; a++) {
		m = modes[a]
		for (b = 1; b <= nc[m]; b++) {
			c = cs[m, b]
			printf "\n### %s, c=%d: µs of the proxy's CPU per request (medians of %d run%s, under perf)\n\n", m, c, nruns, nruns == 1 ? "" : "s"
			head = "| target | CPU | "
			rule = "|---|---|"
			for (i = 1; i <= nl; i++) {
				head = head lname[i] " | "
				rule = rule "---|"
				if (i == 4) { head = head "**fixed** | "; rule = rule "---|" }
			}
			print head "fixed ÷ nginx's CPU | fixed ÷ narwhal-body's CPU |"
			print rule "---|---|"
			for (k = 1; k <= nt; k++) {
				t = tg[k]
				line = sprintf("| %s | %s |", t, num(over_runs(m, c, t, "cpu"), "%.1f"))
				for (i = 1; i <= nl; i++) {
					line = line sprintf(" %s |", num(over_runs(m, c, t, i), "%.1f"))
					if (i == 4) line = line sprintf(" **%s** |", num(over_runs(m, c, t, "fix"), "%.1f"))
				}
				line = line sprintf(" %s | %s |", num(over_runs(m, c, t, "fix/nginx"), "%.2f×"),
				                    num(over_runs(m, c, t, "fix/narwhal-body"), "%.2f×"))
				print line
			}
		}
	}
}

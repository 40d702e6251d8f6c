# Tables of bench/obs/run.sh from its raw.tsv: CPU per request of each
# target (median over valid runs) and the ratios between targets, each the
# median of the per-run ratios (same run, mode and concurrency), so drift
# between runs cancels. -v limit=PCT sets the verdict's bound on on/base.
BEGIN { FS = "\t"; if (limit == "") limit = 5 }
NR == 1 { next }
{
	cell = $2 SUBSEP $3
	if (!(cell in seen)) { seen[cell] = 1; cells[++ncells] = cell }
	if (!($4 in tseen)) { tseen[$4] = 1; targets[++ntargets] = $4 }
	total[cell, $4]++
	if ($9 != "yes" || $5 == 0) next
	ms = $8 / hz_ticks() / $5 * 1000
	n = ++nv[cell, $4]
	cpu[cell, $4, n] = ms
	rps[cell, $4, n] = $7
	byrun[cell, $4, $1] = ms
	runs[$1] = 1
}
function hz_ticks() { return HZ ? HZ : 100 }
function median(arr, n,    i, j, t, v) {
	for (i = 1; i <= n; i++) v[i] = arr[i]
	for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
	if (n == 0) return "nan"
	return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
function ratio(cell, a, b,    r, n, x) {
	n = 0
	for (r in runs)
		if ((cell, a, r) in byrun && (cell, b, r) in byrun && byrun[cell, b, r] > 0)
			x[++n] = byrun[cell, a, r] / byrun[cell, b, r]
	nr = n
	return median(x, n)
}
function pct(x) { return x == "nan" ? "—" : sprintf("%+.1f%%", (x - 1) * 100) }
END {
	print "CPU per request (utime+stime of the daemon, all its threads; median over valid runs):"
	print ""
	print "| mode | c | target | CPU ms / req | req/s | valid runs |"
	print "|---|---|---|---|---|---|"
	for (i = 1; i <= ncells; i++) {
		split(cells[i], k, SUBSEP)
		for (j = 1; j <= ntargets; j++) {
			t = targets[j]
			n = nv[cells[i], t] + 0
			for (m = 1; m <= n; m++) { a[m] = cpu[cells[i], t, m]; b[m] = rps[cells[i], t, m] }
			c = median(a, n); q = median(b, n)
			printf "| %s | %s | %s | %s | %s | %d/%d |\n", k[1], k[2], t,
				c == "nan" ? "—" : sprintf("%.4f", c), q == "nan" ? "—" : sprintf("%.0f", q),
				n, total[cells[i], t]
			delete a; delete b
		}
	}
	print ""
	print "Ratios of CPU per request (median of per-run ratios):"
	print ""
	print "| mode | c | on / off (the access log) | on / base (issue 11's bound: +" limit "%) | off / base | off2 / off (A/A: noise) | verdict |"
	print "|---|---|---|---|---|---|---|"
	for (i = 1; i <= ncells; i++) {
		split(cells[i], k, SUBSEP)
		onoff = ratio(cells[i], "on", "off"); n1 = nr
		onbase = ratio(cells[i], "on", "base"); n2 = nr
		offbase = ratio(cells[i], "off", "base")
		aa = ratio(cells[i], "off2", "off")
		verdict = onbase == "nan" ? "—" : (onbase <= 1 + limit / 100 ? "**within**" : "**over**")
		printf "| %s | %s | %s (%d runs) | %s (%d runs) | %s | %s | %s |\n", k[1], k[2],
			pct(onoff), n1, pct(onbase), n2, pct(offbase), pct(aa), verdict
	}
}

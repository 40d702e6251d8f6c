# Tables of bench/obs/run.sh and policy.sh from their raw.tsv: CPU per
# request of each target (median over valid runs) and the ratios between
# targets, each the median of the per-run ratios (same run, mode and
# concurrency), so drift between runs cancels.
#   -v ratios="a/b;a/b=what it measures;..."  the ratio columns (those
#                         between targets of the run)
#   -v bounds="a/b ..."   the ratios the verdict holds to limit
#   -v limit=PCT          the bound, percent
BEGIN {
	FS = "\t"
	if (limit == "") limit = 5
	nratios = split(ratios, spec, ";")
	for (i = 1; i <= nratios; i++) {
		label[i] = spec[i]; sub(/^[^=]*=?/, "", label[i])
		sub(/=.*/, "", spec[i]); split(spec[i], ab, "/"); num[i] = ab[1]; den[i] = ab[2]
	}
	nb = split(bounds, bl, " ")
	for (i = 1; i <= nb; i++) bound[bl[i]] = 1
}
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
	# Only the ratios between targets of this run.
	n = 0
	for (j = 1; j <= nratios; j++)
		if (num[j] in tseen && den[j] in tseen) {
			n++; num[n] = num[j]; den[n] = den[j]; spec[n] = spec[j]; label[n] = label[j]
		}
	nratios = n
	if (!nratios) { print "(none: no two targets of the run are compared)"; exit }
	nb = 0
	for (j = 1; j <= nratios; j++) if (spec[j] in bound) nb++
	line = "| mode | c |"; rule = "|---|---|"
	for (j = 1; j <= nratios; j++) {
		line = line " " num[j] " / " den[j] (label[j] != "" ? " (" label[j] ")" : "") \
			(spec[j] in bound ? " (bound: +" limit "%)" : "") " |"
		rule = rule "---|"
	}
	print line (nb ? " verdict |" : ""); print rule (nb ? "---|" : "")
	for (i = 1; i <= ncells; i++) {
		split(cells[i], k, SUBSEP)
		line = "| " k[1] " | " k[2] " |"; verdict = nb ? "**within**" : ""
		for (j = 1; j <= nratios; j++) {
			x = ratio(cells[i], num[j], den[j])
			line = line " " pct(x) (spec[j] in bound ? " (" nr " runs)" : "") " |"
			if (!(spec[j] in bound)) continue
			if (x == "nan") { if (verdict != "**over**") verdict = "—" }
			else if (x > 1 + limit / 100) verdict = "**over**"
		}
		print line (nb ? " " verdict " |" : "")
	}
}

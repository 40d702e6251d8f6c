# The chaos soak's analysis (bench/chaos/README.md, "What the report says").
# Inputs (jq --slurpfile): $meta, $faults (the fault records), $samples
# (health samples cut down by report.sh), $base and $fin (GET /narwhal/health
# before the load and at the end), $replay (narwhal-replay summaries) and
# $events (lines of Narwhal's log). Times are Unix milliseconds.

def r(d): if . == null then null else (. * pow(10; d) | round) / pow(10; d) end;
def secs: if . == null then null else (. / 1000 | r(2)) end;
def sum: reduce .[] as $x (0; . + ($x // 0));
def add_maps: reduce .[] as $o ({}; reduce ($o | to_entries[]) as $kv (.; .[$kv.key] += $kv.value));
def first_index(f): first(range(0; length) as $i | select(.[$i] | f) | $i) // null;
# A group of analysed faults (below): the worst case and the totals.
def worst: map(.last_placed_after_s // 0) | max // 0;
def group: {faults: length, worst_last_placed_after_s: worst,
            legs_placed_during: (map(.legs_placed_during) | sum),
            eject_s_max: (map(.eject_s) | map(select(. != null)) | max),
            readmit_s_max: (map(.readmit_s) | map(select(. != null)) | max),
            not_ejected: (map(select(.eject_s == null)) | length)};

$meta[0] as $m
| ($m.monitor_interval_s * 2000) as $limit_ms
| ($samples | sort_by(.t)) as $S
| ($m.victims + $m.stable) as $ids
| (reduce $ids[] as $id ({}; .[$id] = [$S[] | {t, a: .e[$id].a, st: .e[$id].st, lp: .e[$id].lp}]))
  as $ser
| ($faults | map(select(.skipped != true)) | sort_by(.start_ms)) as $F
| ($events | map(select(.event == "engine_error" or .event == "engine_unavailable"
                        or .event == "engine_available"))) as $eng_ev

# One fault: the work its engine received after the fault was in force, and
# how long the engine took to leave placement and to come back.
| def analyse($f):
    ($ser[$f.engine]) as $x
    | ($F | map(select(.engine == $f.engine and .start_ms > $f.start_ms)) | first | .start_ms
       // 1e15) as $next
    | [range(1; $x | length) | select($x[.].t > $f.start_ms and $x[.].t <= $f.end_ms
                                      and $x[.].lp > $x[. - 1].lp)] as $inc
    | ([$x[] | select(.t <= $f.start_ms)] | last) as $before
    | ([$x[] | select(.t <= $f.end_ms)] | last) as $at_end
    | ($x | first_index(.t > $f.start_ms and .t < $next and .a == false)) as $ej
    | (if $ej == null then null
       else $x | first_index(.t > ([$f.end_ms, $x[$ej].t] | max) and .t < $next and .a == true) end)
      as $back
    | ($eng_ev | map(select(.engine == $f.engine and .t > $f.start_ms and .t <= $f.end_ms
                            and .event == "engine_error" and ((.detail // "") | test("refused"; "i")))))
      as $refused
    | ($eng_ev | map(select(.engine == $f.engine and .t >= $f.start_ms and .t < $next))) as $mine
    | {idx: $f.idx, engine: $f.engine, kind: $f.kind,
       at_s: (($f.start_ms - $m.load_start_ms) | secs), lasted_s: (($f.end_ms - $f.start_ms) | secs),
       late_s: $f.delay_s, note: $f.note,
       legs_placed_during: (if $before and $at_end then $at_end.lp - $before.lp else null end),
       # the last sample in the fault whose legs_placed grew: the leg went
       # out before that sample and after the one before it
       last_placed_after_s: (if ($inc | length) == 0 then null
                             else ($x[$inc[-1]].t - $f.start_ms) | secs end),
       last_placed_after_lower_s: (if ($inc | length) == 0 then null
                                   else ([0, $x[$inc[-1] - 1].t - $f.start_ms] | max) | secs end),
       refused_legs_in_log: ($refused | length),
       last_refused_in_log_s: (if ($refused | length) == 0 then null
                               else ($refused[-1].t - $f.start_ms) | secs end),
       eject_s: (if $ej == null then null else ($x[$ej].t - $f.start_ms) | secs end),
       readmit_s: (if $back == null then null else ($x[$back].t - $f.end_ms) | secs end),
       eject_in_log_s: ($mine | map(select(.event == "engine_unavailable")) | first | .t
                        | if . == null then null else (. - $f.start_ms) | secs end),
       readmit_in_log_s: ($mine | map(select(.event == "engine_available" and .t >= $f.end_ms))
                          | first | .t | if . == null then null else (. - $f.end_ms) | secs end)}
  ;

[$F[] | analyse(.)] as $rows
| ($rows | map(select(.kind == "kill" or .kind == "refuse" or .kind == "restart"))) as $dead
| ($rows | map(select(.kind == "hang"))) as $hung
| ($rows | map(select(.kind == "error"))) as $erring

# The load generator's view.
| ($replay | map(.runs[0].counts)) as $rc
| ($rc | map(.sent) | sum) as $sent
| ($rc | map(.outcomes) | add_maps) as $outcomes
| ($rc | map(.status) | add_maps) as $status
| ([$outcomes.timeout, $outcomes.transport, $outcomes.incomplete, $outcomes.cancelled] | sum) as $lost

# The router's view: its counters before the load and at the end.
| ($base[0].counters // {}) as $c0 | ($fin[0].counters // {}) as $c1
| def d(k): ($c1[k] // 0) - ($c0[k] // 0);
  (d("requests_completions") + d("requests_chat")) as $in
| ([$c1.requests_completions, $c1.requests_chat] | sum) as $in_total
| ([$c1.requests_ok, $c1.requests_failed, $c1.refused_before_body, $c1.in_progress] | sum) as $out_total
| ($events | map(select(.event == "request_failed" and .t >= $m.load_start_ms))
   | group_by(.code) | map({key: .[0].code, value: length}) | from_entries) as $codes

# Over the whole run, from the samples.
| ([$S[] | [.e[] | select(.a == false)] | length] | max // 0) as $max_out
| ([$ids[] as $id | $ser[$id] as $x
    | range(1; $x | length) | select($x[. - 1].a == false and $x[.].a == false)
    | $x[.].lp - $x[. - 1].lp] | sum) as $placed_while_out
| ([$m.stable[] as $id | $ser[$id] | map(select(.a == false)) | length] | sum) as $stable_out_samples
| (if $fin[0].engines then $fin[0].engines | map(select(.available != true) | .id) else $ids end)
  as $never_back
| ($rows | map(select(.eject_s != null and .readmit_s == null) | .idx)) as $not_readmitted

| ($m.narwhal_alive and $lost == 0 and $sent == $in and $in_total == $out_total
   and $c1.in_progress == 0) as $g_lost
| (($dead | worst) * 1000 <= $limit_ms) as $g_dead
| (($never_back | length) == 0 and ($not_readmitted | length) == 0) as $g_back
| {
    meta: $m,
    load: {scheduled: ($rc | map(.scheduled) | sum), sent: $sent, ok: ($rc | map(.ok) | sum),
           failed: ($rc | map(.failed) | sum), late: ($rc | map(.late) | sum),
           outcomes: $outcomes, status: $status, lost: $lost,
           streams: [$replay[] | {api: .target.api, stream: .target.stream, sent: .runs[0].counts.sent,
                                  ok: .runs[0].counts.ok, failed: .runs[0].counts.failed}]},
    router: {in: $in, completions: d("requests_completions"), chat: d("requests_chat"),
             ok: d("requests_ok"), failed: d("requests_failed"),
             refused_before_body: d("refused_before_body"), in_progress: $c1.in_progress,
             failure_codes: $codes,
             counters: ([
               "retries", "retry_budget_denied", "no_engine", "first_token_timeouts",
               "prefill_timeouts", "prefill_failed_transport", "prefill_failed_status",
               "decode_failed_transport", "decode_failed_status", "handoff_load_failed",
               "handoff_expired", "stream_errors", "client_disconnects", "engine_status_5xx",
               "aggregate_started", "refused_degraded", "pool_starvation"]
               | map({key: ., value: d(.)}) | from_entries)},
    reconcile: {
      balanced: ($in_total == $out_total),
      equation: "\($c1.requests_completions) + \($c1.requests_chat) = \($c1.requests_ok) + \($c1.requests_failed) + \($c1.refused_before_body) + \($c1.in_progress)",
      sent_equals_in: ($sent == $in), in_progress_at_end: $c1.in_progress},
    failure_share: {load: (if $sent > 0 then (($sent - ($rc | map(.ok) | sum)) / $sent | r(4)) else null end),
                    router: (if $in > 0 then (d("requests_failed") / $in | r(4)) else null end)},
    faults: $rows,
    skipped: ($faults | map(select(.skipped == true))),
    dead: ($dead | group), hung: ($hung | group), erring: ($erring | group),
    fleet: {max_engines_out_at_once: $max_out, legs_placed_while_out: $placed_while_out,
            stable_engine_out_s: ($stable_out_samples * $m.sample_ms / 1000),
            out_at_end: $never_back, ejected_not_readmitted: $not_readmitted,
            samples: ($S | length)},
    goals: {
      no_request_lost: {pass: $g_lost,
        rule: "every request sent got an answer (no timeout, transport error, cut stream), load-generator sent = router in, and the counters balance with nothing in progress"},
      dead_engine_placement: {pass: $g_dead, limit_s: ($limit_ms / 1000), worst_s: ($dead | worst),
        rule: "no leg placed on a killed, refusing or restarting engine later than two monitor intervals after its fault (sampled, upper bound)"},
      engines_readmitted: {pass: $g_back,
        rule: "every engine ejected by a fault came back into placement, and all are in placement at the end"}},
    verdict: (if $g_lost and $g_dead and $g_back then "PASS" else "FAIL" end)
  }

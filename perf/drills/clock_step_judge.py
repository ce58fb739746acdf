"""The clock-step drill's verdict: every delivery judged by the stepped clock, the server's
clock figures and log lines checked, and the summary."""

import os
import re

from clock_step_io import MS, clock_figures, delta, percentile


class Judging:
    """Drill's steps that judge what came out (the state lives in Drill.__init__)."""

    # -- judging -----------------------------------------------------------------------

    def judge(self):
        a = self.a
        window_ns = int(a.window_ms * MS)
        deliveries, bad = self.receiver.snapshot()
        deadline_of = {f"{t}/{k}/{v}": d for (t, k), (v, d) in self.acked.items()}
        deadline_of.update(self.fired_first)
        count = {}
        lateness_ms = []
        early, stepwin, tolerated = [], [], []
        rows = []
        self_early = 0
        retries = 0
        mismatched = 0
        unexpected = []
        unacked_delivered = 0
        # Deadlines that a forward change jumped over (by the stepped clock): they became due
        # all at once, so their lateness is up to the jump by design; reported apart.
        jumped = [(before + old, after + new) for before, after, old, new in self.fake.changes
                  if new > old]
        other_ms = []
        for arrival, key, attempt, doc in deliveries:
            count[key] = count.get(key, 0) + 1
            if attempt not in (None, "1"):
                retries += 1
            if count[key] > 1:
                continue  # judge the first delivery of each key; repeats are counted apart
            tenant, k, version = key.rsplit("/", 2)
            if key not in deadline_of:
                # A write answered 503 may still have taken effect, and fired: allowed, and
                # judged by the deadline the drill sent with it.
                sent = self.unacked.get((tenant, k), set())
                if doc.get("fire_at_us") not in sent:
                    unexpected.append(key)
                    continue
                deadline_of[key] = doc["fire_at_us"]
                unacked_delivered += 1
            d_ns = deadline_of[key] * 1000
            if (doc.get("tenant"), doc.get("key"), str(doc.get("version"))) != (tenant, k, version) \
                    or doc.get("fire_at_us") != deadline_of[key]:
                mismatched += 1
            if isinstance(doc.get("fired_at_us"), int) and doc["fired_at_us"] < deadline_of[key]:
                self_early += 1
            offset = self.fake.offset_at(arrival)
            stepped = arrival + offset
            lateness_ms.append((stepped - d_ns) / MS)
            if not any(lo < d_ns <= hi for lo, hi in jumped):
                other_ms.append((stepped - d_ns) / MS)
            verdict = "on_time"
            if stepped < d_ns:
                verdict = self.classify(arrival, d_ns, stepped, window_ns)
                rec = (key, (d_ns - stepped) / MS, arrival)
                {"step_window": stepwin, "tolerated": tolerated, "early": early}[verdict].append(rec)
            rows.append((key, deadline_of[key], arrival // 1000, offset // 1000,
                         f"{(stepped - d_ns) / MS:.3f}", verdict, self.phase_of(arrival).replace(" ", "_")))
        with open(os.path.join(self.work, "deliveries.csv"), "w") as f:
            f.write("idempotency_key,deadline_us,arrival_real_us,offset_us,lateness_ms,verdict,phase\n")
            for row in rows:
                f.write(",".join(str(x) for x in row) + "\n")
        dups = sum(n - 1 for n in count.values() if n > 1)
        missing = sorted(self.expected - set(count))
        lateness_ms.sort()
        other_ms.sort()
        self.result = {
            "deliveries": len(deliveries), "delivered": len(set(count) & self.expected),
            "early": early, "stepwin": stepwin, "tolerated": tolerated, "dups": dups, "missing": missing,
            "unexpected": unexpected, "retries": retries, "mismatched": mismatched,
            "self_early": self_early, "bad": bad, "lateness_ms": lateness_ms,
            "other_ms": other_ms, "unacked_delivered": unacked_delivered,
        }

    def classify(self, arrival, d_ns, stepped, window_ns):
        """A delivery early by the offset at its arrival: "step_window" when it was on time by an
        offset in force during the window before it (a backward change the shard had not yet
        seen at its next anchor, or a request already under way), "tolerated" when it is early
        by no more than --lead-tolerance-ms, else "early"."""
        if self.a.strict:
            return "early"
        best = max(self.fake.offsets_between(arrival - window_ns, arrival))
        if arrival + best >= d_ns:
            return "step_window"
        if d_ns - stepped <= self.a.lead_tolerance_ms * MS:
            return "tolerated"
        return "early"

    def phase_of(self, arrival):
        """The clock phase an arrival fell in (up to a window after its end), or "-"."""
        window_ns = int(self.a.window_ms * MS)
        for name, lo, hi in self.phase_spans:
            if lo <= arrival <= hi + window_ns:
                return name
        return "-"

    def since_change(self, arrival):
        """ms from the last offset change at or before `arrival` to it."""
        last = None
        for before, _after, _old, _new in self.fake.changes:
            if before <= arrival:
                last = before
        return None if last is None else (arrival - last) / MS

    def backward_cause(self, arrival):
        """The last backward change at or before `arrival`: (size ns, ms since it)."""
        last = None
        for before, _after, old, new in self.fake.changes:
            if before <= arrival and new < old:
                last = (old - new, (arrival - before) / MS)
        return last

    # -- the server's own account: metrics and log -----------------------------------------

    def check_server(self):
        a = self.a
        end = clock_figures(self.api)
        shards = sorted(end["steps"])
        self.check(len(shards) == a.shards, f"/metrics reports {len(shards)} shards (expected {a.shards})")
        total = delta(end["steps"], self.start_figures["steps"])
        self.total_steps = total
        self.total_set_backs = delta(end["set_backs"], self.start_figures["set_backs"])
        self.end_offset = end["offset"]
        for name in ("step back", "step forward"):
            ph = self.phase_figures[name]
            for s in shards:
                self.check(ph["steps"].get(s, 0) == 1,
                           f"{name}: shard {s} counted {ph['steps'].get(s, 0):g} step(s) in "
                           "punctual_clock_steps (expected 1)")
            sign = +1 if name == "step back" else -1
            gauge, widest = ph["extra"]["gauge"], ph["extra"]["widest_ms"]
            for s in shards:
                v = gauge.get(s, 0.0)
                what = (f"{name}: shard {s} showed punctual_clock_offset_seconds {v:+.3f} "
                        f"(expected about {sign * a.step_s:+.1f})")
                if v * sign < 0.9 * a.step_s and widest >= 100:
                    # The gauge shows a step for one 100 ms anchor interval; scrapes this far
                    # apart can miss it, so the miss proves nothing (the counter still must).
                    self.notes.append(f"{what}: not seen, but scrapes were up to {widest:.0f} ms "
                                      "apart on this host (the gauge shows a step for 100 ms): inconclusive")
                    continue
                self.check(v * sign >= 0.9 * a.step_s, what)
        for name in ("slew forward", "slew back"):
            ph = self.phase_figures[name]
            for s in shards:
                # Each small change is under the 50 ms threshold, and the lag it leaves is slewed
                # out at up to 10 % of the rate: no step, unless a shard went unscheduled for
                # several anchor intervals on a starved host.
                self.check(ph["steps"].get(s, 0) == 0,
                           f"{name}: shard {s} counted {ph['steps'].get(s, 0):g} step(s) (expected 0: "
                           f"{a.slew_step_ms:g} ms changes are under the threshold)")
        ph = self.phase_figures["slew back"]
        for s in shards if a.slew_steps > 0 else []:
            self.check(ph["set_backs"].get(s, 0) >= 1,
                       f"slew back: shard {s} counted {ph['set_backs'].get(s, 0):g} set-back(s) "
                       "in punctual_clock_set_backs (leads under the threshold)")
        for s in shards:
            v = end["offset"].get(s, 0.0)
            self.check(abs(v) < 0.05, f"shard {s}: punctual_clock_offset_seconds {v:+.6f} at the end "
                                      "(settled within 50 ms)")
        with open(self.log_path, errors="replace") as f:
            lines = [l for l in f if "system clock stepped" in l]
        back = sum(1 for l in lines if re.search(r'direction="?backward', l))
        fwd = sum(1 for l in lines if re.search(r'direction="?forward', l))
        self.log_lines = (len(lines), back, fwd)
        self.check(back >= a.shards and fwd >= a.shards,
                   f"server log: {len(lines)} \"system clock stepped\" lines, {back} backward and "
                   f"{fwd} forward (at least {a.shards} of each: one per shard)")

    # -- summary -----------------------------------------------------------------------------

    def summary(self):
        a, r = self.a, self.result
        lat = r["lateness_ms"]
        self.check(not r["early"], f"early by the stepped clock: {len(r['early'])}")
        self.check(r["dups"] == 0, f"duplicate deliveries (same Idempotency-Key): {r['dups']}")
        self.check(not r["missing"], f"acknowledged but not delivered: {len(r['missing'])}")
        self.check(not r["unexpected"], f"deliveries of no acknowledged version "
                                        f"(replaced or unknown): {len(r['unexpected'])}")
        self.check(r["mismatched"] == 0, f"deliveries whose body does not match the registration: {r['mismatched']}")
        self.check(r["bad"] == 0, f"requests without Idempotency-Key or JSON body: {r['bad']}")
        print()
        print("=" * 78)
        print("clock-step drill: summary")
        print("=" * 78)
        print(f"binary            {a.bin}")
        print(f"shards            {a.shards} (pinning {a.pinning}), journal store in {self.work}/data")
        print(f"timers            {len(self.acked)} acknowledged over {a.tenants} tenants "
              f"({self.replaced} replaced once; not acknowledged: {self.not_acked})")
        print(f"clock changes     step {-a.step_s:+g} s, step {a.step_s:+g} s, slew {a.slew_steps} x "
              f"{a.slew_step_ms:+g} ms every {a.slew_every_ms} ms, then {a.slew_steps} x {-a.slew_step_ms:+g} ms")
        print(f"delivered         {r['delivered']} of {len(self.expected)} "
              f"({r['deliveries']} requests, {r['retries']} with Punctual-Attempt > 1)")
        if self.unacked:
            print(f"                  writes answered 503 (not acknowledged): {len(self.unacked)} keys, "
                  f"{r['unacked_delivered']} of them delivered anyway (allowed: a 503 may have taken effect)")
        print(f"early             {len(r['early'])}   (judged by the stepped clock, window {a.window_ms:g} ms"
              f"{', strict' if a.strict else ''})")
        sw = r["stepwin"]
        print(f"  step window     {len(sw)}" + (" early by the clock at arrival, on time by the offset in force "
                                                 f"up to {a.window_ms:g} ms before:" if sw else ""))
        groups = {}
        for _key, by, arrival in sw:
            cause = self.backward_cause(arrival)
            kind = "the backward step" if cause and cause[0] >= 50 * MS else "a small backward change"
            g = groups.setdefault(kind, [0, 0.0, 0.0])
            g[0] += 1
            g[1] = max(g[1], by)
            g[2] = max(g[2], cause[1] if cause else 0.0)
        for kind, (n, by, since) in sorted(groups.items()):
            print(f"                  after {kind}: {n}, at most {by:.3f} ms early, "
                  f"arriving at most {since:.1f} ms after it")
        if sw:
            print("                  (a libfaketime step is no kernel clock set: the server's cancel-on-set")
            print("                  timerfd does not fire, so each shard sees it at its next 100 ms anchor)")
        if a.lead_tolerance_ms:
            tol = r["tolerated"]
            print(f"  tolerated       {len(tol)} early by at most --lead-tolerance-ms {a.lead_tolerance_ms:g}")
        if r["early"]:
            by_phase = {}
            for _key, by, arrival in r["early"]:
                g = by_phase.setdefault(self.phase_of(arrival), [0, 0.0])
                g[0] += 1
                g[1] = max(g[1], by)
            for name, (n, by) in sorted(by_phase.items(), key=lambda x: -x[1][0]):
                print(f"  EARLY in phase  {name}: {n}, at most {by:.3f} ms early")
            for key, by, arrival in sorted(r["early"], key=lambda x: -x[1])[:5]:
                since = self.since_change(arrival)
                print(f"    e.g. {key}: {by:.3f} ms early, "
                      f"{'-' if since is None else f'{since:.1f} ms'} after the last offset change")
        print(f"duplicates        {r['dups']}")
        print(f"missing           {len(r['missing'])}" + (f"  e.g. {r['missing'][:5]}" if r['missing'] else ""))
        replaced = sum(1 for k in r["unexpected"] if k in self.superseded)
        print(f"unexpected        {len(r['unexpected'])}" + (
            f"  ({replaced} of a replaced version) e.g. {r['unexpected'][:5]}" if r["unexpected"] else ""))
        if lat:
            oth = r["other_ms"]
            print(f"lateness (ms)     p50 {percentile(lat, 50):.2f}  p99 {percentile(lat, 99):.2f}  "
                  f"max {lat[-1]:.2f}   all deliveries, arrival by the stepped clock - deadline")
            if oth:
                print(f"                  p50 {percentile(oth, 50):.2f}  p99 {percentile(oth, 99):.2f}  "
                      f"max {oth[-1]:.2f}   without the {len(lat) - len(oth)} deadlines a forward change "
                      "jumped over")
        print(f"self-reported     fired_at_us < fire_at_us in {r['self_early']} deliveries (server's own view; "
              "information)")
        shards = sorted(self.total_steps)
        print("clock metrics     per shard: " + "; ".join(
            f"shard {s}: steps {self.total_steps[s]:g}, set-backs {self.total_set_backs.get(s, 0):g}, "
            f"offset now {self.end_offset.get(s, 0) * 1e6:+.1f} us" for s in shards))
        for name, ph in self.phase_figures.items():
            gauge = ph["extra"].get("gauge") if ph["extra"] else None
            g = "" if not gauge else "; offset gauge seen " + ", ".join(
                f"{s}: {v:+.3f} s" for s, v in sorted(gauge.items()))
            print(f"  {name:<15} steps {dict((s, int(v)) for s, v in ph['steps'].items())}, "
                  f"set-backs {dict((s, int(v)) for s, v in ph['set_backs'].items())}{g}")
        n, back, fwd = self.log_lines
        print(f"server log        {n} \"system clock stepped\" lines ({back} backward, {fwd} forward)")
        for note in self.notes:
            print(f"note              {note}")
        print("-" * 78)
        if self.failures:
            print(f"FAILED: {len(self.failures)} assertion(s)")
            for f in self.failures:
                print(f"  - {f}")
        else:
            print("PASSED: every assertion holds")
        print(f"work directory    {self.work} (server.log, punctual.toml, faketime.rc, deliveries.csv)")
        print("=" * 78)

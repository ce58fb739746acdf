#!/usr/bin/env python3
"""Registration cost by step, from `perf script` of a `--call-graph dwarf` recording.

    perf script -i OUT.data -F comm,tid,ip,sym,dso | python3 perf/load/steps.py TIMERS [HZ]

Each sample is given to the innermost frame of its stack that names a step (below, first
match wins within a frame), so an allocation, a copy or a system call counts to the step that
made it; a sample whose stack names none counts to its thread. Prints ns per timer for each
step: samples x (1/HZ, 499 by default) / TIMERS (the timers acknowledged over the recording).
"""
import collections, re, sys

STEPS = [
    ("watchdog", r"watchdog"),
    ("yield (cooperate)", r"runtime::cooperate"),
    ("parse", r"api::scan::|api::body::parse_item|ItemBody|validate_name|meta_for|serde_json::de|api::batch::scan"),
    ("answer encoding", r"api::batch::encode|serde_json::ser|BatchItem|respond::"),
    ("journal encode", r"journal::record|journal::outbox|store::deque"),
    ("commit and fsync", r"journal::commit|journal::segment|journal::io|journal::file|JournalStore.*after_pass|JournalStore.*begin_pass"),
    ("ack", r"store::acks|store::Ack|oneshot|doorbell|finish_chunk|Collect|op::Reply|engine::handle::answer"),
    ("apply and table insert", r"wheel::|shard::apply|Shard.*::schedule|PackedTimer|forget_replaced"),
    ("admission", r"punctual::quota::|shard::gate::|JournalStore.*admit|punctual::ring::|push_schedule|checked_deadline|schedule_guarded|schedule_with_meta|Handle::pack|Handle::push"),
    ("shard loop", r"punctual::shard::"),
    ("HTTP", r"hyper|api::routes|api::gather|api::http|api::accept|api::service"),
    ("executor (glommio)", r"glommio::"),
]
timers = float(sys.argv[1])
period_ns = 1e9 / float(sys.argv[2] if len(sys.argv) > 2 else 499)
compiled = [(name, re.compile(rx)) for name, rx in STEPS]
steps, threads = collections.Counter(), collections.Counter()

def account(head, frames):
    if head is None:
        return
    comm = head.split()[0]
    for frame in frames:
        step = next((name for name, rx in compiled if rx.search(frame)), None)
        if step:
            break
    else:
        step = "other: " + comm
    steps[step] += 1
    threads[comm] += 1

head, frames = None, []
for line in sys.stdin:
    if not line.strip():
        account(head, frames); head, frames = None, []
    elif not line.startswith((" ", "\t")):
        account(head, frames); head, frames = line, []
    else:
        frames.append(line.strip())
account(head, frames)
total = sum(steps.values())
print(f"samples {total}, ns per timer {total * period_ns / timers:.0f}")
for step, n in steps.most_common():
    print(f"{n * period_ns / timers:8.0f}  {step}")
print("by thread:", {k: round(v * period_ns / timers) for k, v in threads.items()})

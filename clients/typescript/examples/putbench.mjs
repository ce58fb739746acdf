// PUTs per second through the client and through fetch alone (what the client uses), on one
// connection and on 16 (concurrent loops), against a running server (clients/bench/run.sh
// starts one). Run `npm run build` first.
//
//   node examples/putbench.mjs http://127.0.0.1:7480 3
//
// Each variant runs for the given seconds, three times, alternated, and prints one JSON line per
// run: PUTs per second and this process's CPU per PUT.
import { Client } from "punctual-client";

const [base, secondsArg] = process.argv.slice(2);
const seconds = Number(secondsArg);

async function run(kind, conns) {
  const client = new Client(base);
  let done = 0;
  const end = Date.now() + seconds * 1000;
  const worker = async (w) => {
    for (let i = 0; Date.now() < end; i++) {
      const key = `w${w}-${i % 1000}`;
      if (kind === "client") {
        await client.put("bench", key, { delay_ms: 3_600_000, payload: { order: i } });
      } else {
        const r = await fetch(`${base}/v1/timers/bench/${key}`, {
          method: "PUT",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ delay_ms: 3_600_000, payload: { order: i } }),
        });
        const text = await r.text();
        if (r.status >= 300) throw new Error(text);
        JSON.parse(text).version;
      }
      done++;
    }
  };
  await Promise.all(Array.from({ length: conns }, (_, w) => worker(w)));
  return done;
}

for (let round = 0; round < 3; round++) {
  for (const conns of [1, 16]) {
    for (const kind of ["client", "raw"]) {
      const before = process.cpuUsage();
      const n = await run(kind, conns);
      const used = process.cpuUsage(before);
      const cpu_us_per_put = (used.user + used.system) / n;
      console.log(JSON.stringify({ lang: "typescript", kind, conns, puts_per_s: n / seconds, cpu_us_per_put }));
    }
  }
}

const base = Object.fromEntries(Array.from({ length: 20 }, (_, i) => ["k" + i, i]))
const small = { type: "t", data: { a: 1 } }
let sink = 0
const variants = {
  "override 1 of 20": (s) => ({ ...s, k3: 5 }),
  "override 3 of 20": (s) => ({ ...s, k3: 5, k4: 6, k5: 7 }),
  "add 1 to 20": (s) => ({ ...s, extra: 5 }),
  "small + 1": (s) => ({ ...small, extra: 5 }),
  "small + 3": (s) => ({ ...small, e1: 5, e2: 6, e3: 7 }),
  "small + 5": (s) => ({ ...small, e1: 5, e2: 6, e3: 7, e4: 8, e5: 9 }),
  "small + 8": (s) => ({ ...small, e1: 5, e2: 6, e3: 7, e4: 8, e5: 9, e6: 1, e7: 2, e8: 3 }),
}
for (let round = 0; round < 2; round++) for (const [name, f] of Object.entries(variants)) {
  const t = performance.now()
  let s = base
  for (let i = 0; i < 200000; i++) { const r = f(s); sink += r.k1 ?? 1 }
  console.log(name.padEnd(20), ((performance.now() - t) * 1000 / 200000).toFixed(3), "µs")
}

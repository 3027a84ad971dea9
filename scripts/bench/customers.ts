/**
 * `npm run bench:customers [-- --customers N] [--duration N]` — the customers surface at scale.
 *
 * It starts the whole app in this process exactly as `npm run bench:auth` does (the routes of
 * src/server.ts on 127.0.0.1 and an ephemeral port, HTTP rate limits off, logging at Warning),
 * on a scratch database `cp_bench_<random>` of the DATABASE_URL server (this machine only; dropped at
 * the end) or, without DATABASE_URL, on embedded PGlite in memory. Then:
 *
 *   1. seed: N customers (default 100,000) through the command path — the `Customers.create` use
 *      case in-process, 16 at a time: an email check, one event appended and the read model
 *      projected inline, one transaction each — with varied names (several languages), emails on
 *      many domains, phones, a `source` in metadata and a few tags (`newsletter` ≈ 35 %, `returning`
 *      ≈ 20 %, `wholesale` ≈ 4 %, `vip` ≈ 2 %); reported as creates/s with p50/p99 per create. Then,
 *      on PostgreSQL, `VACUUM ANALYZE customers.customers`, as autovacuum would after such a load
 *      (embedded PGlite has no autovacuum: there the table keeps no statistics, as in a deployment);
 *   2. EXPLAIN (ANALYZE) of the SQL `GET /user` runs (`listStatements` of src/customers/queries.ts,
 *      the page and the count) for searches, tag and since filters and a page of each sort field:
 *      the plan's access path and the server's execution time (median of 5);
 *   3. autocannon at 64 connections (in a worker thread), each for `--duration` seconds (default 10)
 *      after a 2 s warm-up, with an admin's access token: `GET /health` (the floor of the HTTP stack),
 *      `GET /user?q=kowalsk&sort=totalSpent:desc` (about 1 % of the customers match), `GET /user/:id`
 *      on a random one of 10,000 customers per request, and `GET /user?sort=totalSpent:desc` with no
 *      filter (its count covers every row);
 *
 * and prints both tables. On embedded PGlite (one connection, in this process) seeding is slower and
 * everything queues behind one session: `--customers 20000` keeps a run short. Numbers are only
 * comparable on the same machine: the load generator, the app and the database share its CPUs.
 */
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { cpus, tmpdir } from "node:os"
import { join } from "node:path"
import { performance } from "node:perf_hooks"
import { HttpServer } from "@effect/platform"
import { NodeRuntime } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { Console, Effect, Logger, LogLevel } from "effect"
import { AppConfig } from "../../src/config.js"
import { Customers, type NewCustomerInput } from "../../src/customers/Customers.js"
import { type CustomerListQuery, listStatements } from "../../src/customers/queries.js"
import { DatabaseInfo } from "../../src/db/Database.js"
import { CredentialVerifier } from "../../src/http/Auth.js"
import { createAdmin } from "../../src/identity/admin.js"
import {
  benchApp,
  benchArguments,
  type CannonOptions,
  field,
  fmt,
  jsonRequest,
  loadAverage,
  type Measurement,
  measure,
  median,
  ms,
  printFootnotes,
  printTable,
  quantile
} from "./support.js"

// ---------------------------------------------------------------------------------------------------
// Settings

const USAGE = "usage: npm run bench:customers -- [--customers N] [--duration N]"

const options = (() => {
  const { integer } = benchArguments(["customers", "duration"], USAGE)
  return {
    customers: integer("customers", 100_000, 100, 1_000_000),
    seconds: integer("duration", 10, 1, 600)
  }
})()
const { customers: CUSTOMERS, seconds } = options

const WARM_UP_SECONDS = 2
const READ_CONNECTIONS = 64
/** Creates in flight while seeding (the PostgreSQL pool has 10 connections; PGlite has one). */
const SEED_CONCURRENCY = 16
/** `GET /user/:id` picks one of this many customers at random per request. */
const ID_SAMPLE = 10_000
/** Matches Kowalski and Kowalska (two of the surnames below, so about 1 % of the customers). */
const SEARCH = "kowalsk"
const EXPLAIN_RUNS = 5

const ADMIN_EMAIL = `bench.admin.${randomBytes(4).toString("hex")}@example.com`
const ADMIN_PASSWORD = "correct horse battery staple"

// ---------------------------------------------------------------------------------------------------
// Customers: deterministic, varied, realistic enough for search and filters to be meaningful

const FIRST_NAMES = (
  "James Mary Robert Patricia John Jennifer Michael Linda David Elizabeth William Barbara Richard Susan " +
  "Joseph Jessica Thomas Sarah Charles Karen Daniel Nancy Matthew Lisa Anthony Betty Mark Sandra Olivia " +
  "Liam Emma Noah Ava Oliver Sophia Elijah Isabella Lucas Mia Mason Amelia Ethan Harper Logan Evelyn " +
  "Ada Grace Alan Hedy Margaret Katherine Barbara Radia Sofía Mateo Lucía Hugo Léa Chloé Élodie Théo " +
  "Lukas Jonas Leonie Jürgen Søren Åsa Björn Ingrid Giulia Francesco Chiara Alessandro João Inês " +
  "Piotr Katarzyna Małgorzata Agnieszka Tomasz Zofia Jan Anna Yuki Hiroshi Sakura Haruto Wei Mei " +
  "Jun Xin Aarav Priya Ananya Rohan Fatima Omar Layla Youssef Amara Kwame Chidi Ngozi Zanele Thabo " +
  "Elif Mehmet Ayşe Emre Nikos Eleni Dmitri Olga Siobhán Niamh Seán Ciarán Maximilian Charlotte"
).split(" ")

const LAST_NAMES = (
  "Smith Johnson Williams Brown Jones Garcia Miller Davis Rodriguez Martinez Hernandez Lopez Gonzalez " +
  "Wilson Anderson Thomas Taylor Moore Jackson Martin Lee Perez Thompson White Harris Sanchez Clark " +
  "Ramirez Lewis Robinson Walker Young Allen King Wright Scott Torres Nguyen Hill Flores Green Adams " +
  "Nelson Baker Hall Rivera Campbell Mitchell Carter Roberts Lovelace Hopper Turing Lamarr Hamilton " +
  "Perlman Liskov Müller Schmidt Schneider Fischer Weber Meyer Wagner Becker Schulz Hoffmann Schäfer " +
  "Koch Richter Klein Wolf Neumann Schwarz Zimmermann Braun Krüger Hofmann Kowalski Kowalska Nowak " +
  "Wiśniewski Wójcik Kamińska Lewandowski Zieliński Szymańska Woźniak Dąbrowski Rossi Russo Ferrari " +
  "Esposito Bianchi Romano Colombo Ricci Marino Greco Bruno Gallo Conti DeLuca Dubois Durand Lefebvre " +
  "Moreau Laurent Simon Michel Leroy Roux Fournier Girard Bonnet Dupont Lambert Fontaine Rousseau " +
  "Silva Santos Oliveira Souza Pereira Costa Rodrigues Almeida Fernandes Gomes Tanaka Suzuki " +
  "Takahashi Watanabe Ito Yamamoto Nakamura Kobayashi Kim Park Choi Jung Kang Chen Wang Li Zhang Liu " +
  "Yang Huang Zhao Wu Zhou Singh Kumar Patel Shah Sharma Gupta Reddy Iyer Okafor Mensah Adeyemi " +
  "Okonkwo Diallo Traoré Ndlovu Dlamini Mahlangu Hansen Johansson Andersson Nielsen Jensen Larsen " +
  "Eriksson Virtanen Korhonen Novák Svoboda Horváth Nagy Kovács Popescu Ionescu Yilmaz Kaya Demir " +
  "Şahin Papadopoulos Ivanov Petrov Sokolov Murphy Kelly Byrne O'Brien Walsh O'Connor MacDonald " +
  "Campbell-Stewart García-Márquez van der Berg de Vries Janssen Bakker Visser Peeters Dubois-Martin"
)
  // "van der Berg" and "de Vries" are one surname each.
  .replace(/van der Berg/, "van_der_Berg")
  .replace(/de Vries/, "de_Vries")
  .split(" ")
  .map((name) => name.replaceAll("_", " "))

const DOMAINS = (
  "gmail.com gmail.com gmail.com outlook.com hotmail.com yahoo.com icloud.com proton.me gmx.de web.de " +
  "t-online.de orange.fr free.fr libero.it wp.pl o2.pl seznam.cz yandex.ru naver.com qq.com 163.com " +
  "rediffmail.com mail.com fastmail.com acme-corp.com northwind.example globex.io initech.net umbrella.co.uk"
).split(" ")

const SOURCES = ["web", "web", "web", "pos", "import", "marketplace", "phone"]

/** mulberry32: a small seeded PRNG, so every run seeds the same customers. */
const prng = (seed: number) => {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296
  }
}

/** An email local part from a name: no accents, no spaces or apostrophes. */
const ascii = (text: string) =>
  text
    .normalize("NFD")
    .replace(/[\u0300-\u036f]/g, "")
    .replace(/ß/g, "ss")
    .replace(/ł/g, "l")
    .replace(/Ł/g, "L")
    .replace(/[øØ]/g, "o")
    .replace(/[^A-Za-z0-9-]/g, "")
    .toLowerCase()

const customerInputs = (count: number): ReadonlyArray<NewCustomerInput> => {
  const random = prng(20_260_101)
  const pick = <A>(list: ReadonlyArray<A>): A => list[Math.floor(random() * list.length)] as A
  const inputs: Array<NewCustomerInput> = []
  for (let i = 1; i <= count; i++) {
    const firstName = pick(FIRST_NAMES)
    const lastName = pick(LAST_NAMES)
    const first = ascii(firstName)
    const last = ascii(lastName)
    // The number keeps every address unique (one address, one customer).
    const local = [
      `${first}.${last}`,
      `${first.charAt(0)}${last}`,
      `${last}.${first}`,
      `${first}_${last}`,
      first
    ][Math.floor(random() * 5)]
    const tags: Array<string> = []
    if (random() < 0.35) tags.push("newsletter")
    if (random() < 0.2) tags.push("returning")
    if (random() < 0.04) tags.push("wholesale")
    if (random() < 0.02) tags.push("vip")
    inputs.push({
      email: `${local}${i}@${pick(DOMAINS)}`,
      firstName,
      lastName,
      phone: random() < 0.6 ? `+1${Math.floor(2_000_000_000 + random() * 7_999_999_999)}` : null,
      tags,
      metadata: { source: pick(SOURCES) }
    })
  }
  return inputs
}

// ---------------------------------------------------------------------------------------------------
// Scratch database and the app (as in bench:auth)

const BenchLive = benchApp()

// ---------------------------------------------------------------------------------------------------
// Helpers

/**
 * A module for autocannon's `setupRequest` (it runs in the load generator's worker thread, so it is
 * a file): each request asks for a random one of `ids`. Removed with the scope.
 */
const randomIdModule = (ids: ReadonlyArray<string>) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const dir = mkdtempSync(join(tmpdir(), "bench-customers-"))
      const file = join(dir, "random-customer.cjs")
      writeFileSync(
        file,
        `"use strict"\nconst ids = ${JSON.stringify(ids)}\n` +
          "module.exports = (request) => {\n" +
          '  request.path = "/user/" + ids[Math.floor(Math.random() * ids.length)]\n' +
          "  return request\n}\n"
      )
      return { dir, file }
    }),
    ({ dir }) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
  ).pipe(Effect.map(({ file }) => file))

// ---------------------------------------------------------------------------------------------------
// EXPLAIN (ANALYZE) of the list statements

interface PlanNode {
  readonly "Node Type": string
  readonly "Index Name"?: string
  readonly "Scan Direction"?: string
  readonly "Sort Method"?: string
  readonly Plans?: ReadonlyArray<PlanNode>
}

interface Explained {
  readonly Plan: PlanNode
  readonly "Execution Time": number
}

/** The access path of a plan, outermost first, without the nodes every plan has. */
const accessPath = (node: PlanNode): string => {
  const parts: Array<string> = []
  const visit = (n: PlanNode) => {
    const type = n["Node Type"]
    if (type !== "Limit" && type !== "Aggregate") {
      const backward = n["Scan Direction"] === "Backward" ? " backward" : ""
      const index = n["Index Name"] ? ` ${n["Index Name"]}` : ""
      const sort = n["Sort Method"] ? ` (${n["Sort Method"]})` : ""
      parts.push(`${type}${backward}${index}${sort}`)
    }
    for (const child of n.Plans ?? []) visit(child)
  }
  visit(node)
  return parts.join(" → ")
}

const explain = (
  sql: SqlClient.SqlClient,
  statement: { compile: () => readonly [string, ReadonlyArray<unknown>] }
) =>
  Effect.gen(function* () {
    const [text, params] = statement.compile()
    const runs: Array<Explained> = []
    for (let i = 0; i < EXPLAIN_RUNS; i++) {
      const rows = yield* sql.unsafe<{ "QUERY PLAN": ReadonlyArray<Explained> }>(
        `EXPLAIN (ANALYZE, FORMAT JSON) ${text}`,
        params
      )
      const plan = rows[0]?.["QUERY PLAN"][0]
      if (plan === undefined) return yield* Effect.dieMessage("EXPLAIN returned no plan")
      runs.push(plan)
    }
    const first = runs[0] as Explained
    return { path: accessPath(first.Plan), ms: median(runs.map((r) => r["Execution Time"])) }
  })

const explainList = (
  sql: SqlClient.SqlClient,
  label: string,
  query: Omit<CustomerListQuery, "page" | "display"> & { page?: number }
) =>
  Effect.gen(function* () {
    const full: CustomerListQuery = { page: 1, display: 20, ...query }
    const statements = listStatements(sql, full)
    const count = (yield* statements.count)[0]?.count ?? 0
    const page = yield* explain(sql, statements.models)
    const total = yield* explain(sql, statements.count)
    return [label, fmt(count), page.path, page.ms.toFixed(2), total.path, total.ms.toFixed(2)]
  })

// ---------------------------------------------------------------------------------------------------
// The run

const program = Effect.gen(function* () {
  const info = yield* DatabaseInfo
  const config = yield* AppConfig
  const sql = yield* SqlClient.SqlClient
  const address = (yield* HttpServer.HttpServer).address
  if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("the server is not on TCP")
  const base = `http://127.0.0.1:${address.port}`
  yield* Console.log(
    `bench: ${info.kind === "postgres" ? `PostgreSQL (pool of ${config.databaseMaxConnections})` : "embedded PGlite (one connection, in this process)"}, ` +
      `${cpus().length} CPUs, Node ${process.version}, ${fmt(CUSTOMERS)} customers, ` +
      `${seconds} s per measurement after ${WARM_UP_SECONDS} s of warm-up, load average ${loadAverage()}`
  )

  // An admin; its access token's actor creates the customers in-process.
  yield* createAdmin(ADMIN_EMAIL, ADMIN_PASSWORD)
  const logIn = Effect.gen(function* () {
    const login = yield* jsonRequest(`${base}/auth/login`, {
      method: "POST",
      body: { email: ADMIN_EMAIL, password: ADMIN_PASSWORD }
    })
    const accessToken = field(login.body, "accessToken")
    if (login.status !== 200 || typeof accessToken !== "string") {
      return yield* Effect.dieMessage(
        `POST /auth/login answered ${login.status}: ${JSON.stringify(login.body)}`
      )
    }
    return accessToken
  })
  const actor = yield* (yield* CredentialVerifier).verify(yield* logIn)

  // 1. Seed through the use case.
  const customers = yield* Customers
  const inputs = customerInputs(CUSTOMERS)
  const ids: Array<string> = new Array(CUSTOMERS)
  const latencies = new Float64Array(CUSTOMERS)
  const step = Math.max(1, Math.floor(CUSTOMERS / 10))
  let done = 0
  yield* Console.log(
    `… seeding ${fmt(CUSTOMERS)} customers with Customers.create, ${SEED_CONCURRENCY} at a time`
  )
  const seedStarted = performance.now()
  yield* Effect.forEach(
    inputs,
    (input, i) =>
      Effect.gen(function* () {
        const t0 = performance.now()
        const created = yield* customers.create(actor, input)
        latencies[i] = performance.now() - t0
        ids[i] = created.id
        done++
        if (done % step === 0 && done < CUSTOMERS) {
          const elapsed = (performance.now() - seedStarted) / 1000
          yield* Console.log(`  ${fmt(done)} (${fmt(done / elapsed)} creates/s so far)`)
        }
      }),
    { concurrency: SEED_CONCURRENCY, discard: true }
  ).pipe(Effect.catchAll((e) => Effect.dieMessage(`Customers.create failed: ${JSON.stringify(e)}`)))
  const seedSeconds = (performance.now() - seedStarted) / 1000
  latencies.sort()
  // What autovacuum would do after such a load; embedded PGlite has none, so there the table stays as
  // a deployment would see it: no statistics, no visibility map.
  if (info.kind === "postgres") yield* sql`VACUUM ANALYZE customers.customers`

  // A fresh token (they last an hour; a long seed may outlive the first), and probes: the runs below
  // must answer 200.
  const token = yield* logIn
  const listUrl = `${base}/user?q=${SEARCH}&sort=totalSpent:desc`
  const probe = yield* jsonRequest(listUrl, { token })
  const matches = field(probe.body, "count")
  if (probe.status !== 200 || typeof matches !== "number") {
    return yield* Effect.dieMessage(`GET ${listUrl} answered ${probe.status}: ${JSON.stringify(probe.body)}`)
  }
  const sample = Array.from(
    { length: Math.min(ID_SAMPLE, CUSTOMERS) },
    (_, i) => ids[Math.floor((i * CUSTOMERS) / Math.min(ID_SAMPLE, CUSTOMERS))]
  ).filter((id): id is string => id !== undefined)
  const one = yield* jsonRequest(`${base}/user/${sample[0]}`, { token })
  if (one.status !== 200) return yield* Effect.dieMessage(`GET /user/:id answered ${one.status}`)

  // 2. Plans of the list statements on this data.
  yield* Console.log("… EXPLAIN (ANALYZE) of the GET /user statements")
  const newest = yield* sql<{ at: Date }>`SELECT created_at AS at FROM customers.customers
    ORDER BY created_at DESC, customer_id DESC OFFSET ${Math.floor(CUSTOMERS / 20)} LIMIT 1`
  const since = newest[0]?.at ?? new Date(0)
  const rareEmail = inputs[Math.floor(CUSTOMERS / 3)]?.email ?? ""
  type SortField = CustomerListQuery["sort"]["field"]
  const desc = (sortField: SortField) => ({ field: sortField, direction: "desc" as const })
  const asc = (sortField: SortField) => ({ field: sortField, direction: "asc" as const })
  const plans = [
    ["query", "rows", "page: plan", "page ms", "count: plan", "count ms"],
    yield* explainList(sql, `q=${SEARCH} sort=totalSpent:desc`, { q: SEARCH, sort: desc("totalSpent") }),
    yield* explainList(sql, `q=${SEARCH} (default sort)`, { q: SEARCH, sort: desc("createdAt") }),
    yield* explainList(sql, "q=<one email> sort=totalSpent:desc", { q: rareEmail, sort: desc("totalSpent") }),
    yield* explainList(sql, "q=ada lovelace sort=lastName:asc", { q: "ada lovelace", sort: asc("lastName") }),
    yield* explainList(sql, "q=an (2 letters: no trigram)", { q: "an", sort: desc("totalSpent") }),
    yield* explainList(sql, "tag=vip", { tag: "vip", sort: desc("createdAt") }),
    yield* explainList(sql, "tag=newsletter sort=email:asc", { tag: "newsletter", sort: asc("email") }),
    yield* explainList(sql, "since=<newest 5 %>", { since, sort: desc("createdAt") }),
    yield* explainList(sql, "since=<newest 5 %> sort=totalSpent:desc", { since, sort: desc("totalSpent") }),
    yield* explainList(sql, "sort=createdAt:desc", { sort: desc("createdAt") }),
    yield* explainList(sql, "sort=totalSpent:desc", { sort: desc("totalSpent") }),
    yield* explainList(sql, "sort=orderCount:asc", { sort: asc("orderCount") }),
    yield* explainList(sql, "sort=email:asc", { sort: asc("email") }),
    yield* explainList(sql, "sort=lastName:desc", { sort: desc("lastName") }),
    yield* explainList(sql, "sort=lastName:asc page=50", { sort: asc("lastName"), page: 50 })
  ]

  // 3. HTTP at 64 connections.
  const run = (label: string, options: Omit<CannonOptions, "duration">) =>
    Effect.zipRight(
      Console.log(`… ${label}, ${READ_CONNECTIONS} connections`),
      measure(options, { warmUpSeconds: WARM_UP_SECONDS, seconds, settleSeconds: 1 })
    )
  const auth = { authorization: `Bearer ${token}` }
  const health = yield* run("GET /health", { url: `${base}/health`, connections: READ_CONNECTIONS })
  const search = yield* run(`GET /user?q=${SEARCH}&sort=totalSpent:desc`, {
    url: listUrl,
    connections: READ_CONNECTIONS,
    headers: auth
  })
  const pickId = yield* randomIdModule(sample)
  const byId = yield* run(`GET /user/:id (random of ${fmt(sample.length)})`, {
    url: `${base}/user`,
    connections: READ_CONNECTIONS,
    headers: auth,
    requests: [{ method: "GET", path: `/user/${sample[0]}`, setupRequest: pickId }]
  })
  const unfiltered = yield* run("GET /user?sort=totalSpent:desc", {
    url: `${base}/user?sort=totalSpent:desc`,
    connections: READ_CONNECTIONS,
    headers: auth
  })

  const row = (label: string, m: Measurement, note: string) => [
    label,
    `${fmt(m.perSecond)} req/s`,
    ms(m.p50Ms),
    ms(m.p99Ms),
    note
  ]
  yield* printTable([
    ["metric", "measured", "p50", "p99", "notes"],
    [
      `seed: Customers.create × ${fmt(CUSTOMERS)}, ${SEED_CONCURRENCY} at a time`,
      `${fmt(CUSTOMERS / seedSeconds)} creates/s`,
      ms(quantile(latencies, 0.5)),
      ms(quantile(latencies, 0.99)),
      `${fmt(seedSeconds)} s in all; 1 event + projection per create`
    ],
    row(`GET /health, ${READ_CONNECTIONS} conns`, health, "floor of the HTTP stack"),
    row(
      `GET /user?q=${SEARCH}&sort=totalSpent:desc, ${READ_CONNECTIONS} conns`,
      search,
      `${fmt(matches)} of ${fmt(CUSTOMERS)} match; page of 20 + count`
    ),
    row(`GET /user/:id, ${READ_CONNECTIONS} conns`, byId, `random of ${fmt(sample.length)} ids per request`),
    row(
      `GET /user?sort=totalSpent:desc, ${READ_CONNECTIONS} conns`,
      unfiltered,
      "no filter: count of every row"
    )
  ])
  yield* Console.log(
    `EXPLAIN (ANALYZE) on the seeded data, server execution time, median of ${EXPLAIN_RUNS}:`
  )
  yield* printTable(plans)
  yield* printFootnotes([
    ["/health", health],
    ["/user?q", search],
    ["/user/:id", byId],
    ["/user", unfiltered]
  ])
})

program.pipe(
  Effect.scoped,
  Effect.provide(BenchLive),
  Effect.provide(Logger.minimumLogLevel(LogLevel.Warning)),
  Effect.timeoutFail({
    duration: `${Math.ceil(CUSTOMERS / 20) + 4 * (seconds + WARM_UP_SECONDS + 2) + 300} seconds`,
    onTimeout: () => new Error("bench took too long")
  }),
  NodeRuntime.runMain
)

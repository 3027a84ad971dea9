/**
 * The bare peer of `npm run bench:http`: `node:http` and a `pg` pool, nothing else — the floor a
 * request can cost on this machine. Started by the bench as a child process; it prints
 * `{"port":N}` on stdout once it listens. Environment: DATABASE_URL (the bench's database, with the
 * table `bench_peer.users` the bench created), POOL_SIZE, PORT (0 = any free port).
 *
 *   GET  /health     → 200 {"status":"ok"}
 *   GET  /users/:id  → 200 the row by primary key, or 404
 *   POST /users      → 201 the row inserted from {email, firstName, lastName} (one INSERT … RETURNING)
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import pg from "pg"

const databaseUrl = process.env.DATABASE_URL
if (!databaseUrl) throw new Error("DATABASE_URL is required")
const pool = new pg.Pool({
  connectionString: databaseUrl,
  max: Number(process.env.POOL_SIZE ?? 10),
  idleTimeoutMillis: 60_000,
  application_name: "bench-bare"
})

const COLUMNS = 'id, email, first_name AS "firstName", last_name AS "lastName", created_at AS "createdAt"'
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

const send = (res: ServerResponse, status: number, body: unknown) => {
  const text = JSON.stringify(body)
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) })
  res.end(text)
}

const readBody = (req: IncomingMessage) =>
  new Promise<string>((resolve, reject) => {
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")))
    req.on("error", reject)
  })

const field = (body: unknown, name: string): string | undefined => {
  if (typeof body !== "object" || body === null) return undefined
  const value: unknown = Object.entries(body).find(([k]) => k === name)?.[1]
  return typeof value === "string" ? value : undefined
}

const handle = async (req: IncomingMessage, res: ServerResponse) => {
  const url = req.url ?? "/"
  if (req.method === "GET" && url === "/health") return send(res, 200, { status: "ok" })
  if (req.method === "GET" && url.startsWith("/users/")) {
    const id = url.slice("/users/".length)
    if (!UUID.test(id)) return send(res, 404, { error: "not found" })
    const { rows } = await pool.query(`SELECT ${COLUMNS} FROM bench_peer.users WHERE id = $1`, [id])
    return rows[0] === undefined ? send(res, 404, { error: "not found" }) : send(res, 200, rows[0])
  }
  if (req.method === "POST" && url === "/users") {
    const body: unknown = JSON.parse(await readBody(req))
    const email = field(body, "email")
    const firstName = field(body, "firstName")
    const lastName = field(body, "lastName")
    if (!email || !firstName || !lastName) return send(res, 400, { error: "email, firstName, lastName" })
    const { rows } = await pool.query(
      `INSERT INTO bench_peer.users (email, first_name, last_name) VALUES ($1, $2, $3) RETURNING ${COLUMNS}`,
      [email, firstName, lastName]
    )
    return send(res, 201, rows[0])
  }
  return send(res, 404, { error: "not found" })
}

const server = createServer((req, res) => {
  handle(req, res).catch((error: unknown) => {
    if (!res.headersSent) send(res, 500, { error: String(error) })
  })
})
server.listen(Number(process.env.PORT ?? 0), "127.0.0.1", () => {
  const address = server.address()
  if (address === null || typeof address === "string") throw new Error("not on TCP")
  process.stdout.write(`${JSON.stringify({ port: address.port })}\n`)
})
process.once("SIGTERM", () => {
  server.close()
  void pool.end()
})

/**
 * An in-process SMTP sink (`smtp-server`) on 127.0.0.1: plain TCP, AUTH optional, no STARTTLS. It
 * keeps every accepted mail, parsed just enough for assertions (headers, RFC 2047 subjects,
 * quoted-printable/base64 text, the first text/plain part of a multipart), and can be told to
 * reject mails at RCPT or at DATA. mailparser is not installable here, hence the small parser.
 */
import { Effect, type Scope } from "effect"
import { SMTPServer, type SMTPServerError } from "smtp-server"

export interface ReceivedMail {
  /** Envelope sender (MAIL FROM). */
  readonly from: string
  /** Envelope recipients (RCPT TO). */
  readonly to: ReadonlyArray<string>
  /** Decoded Subject header ("" when absent). */
  readonly subject: string
  /** Decoded text body, line breaks as `\n`. */
  readonly text: string
  /** Header values by lower-cased name (unfolded, not decoded; repeated headers joined by "\n"). */
  readonly headers: Readonly<Record<string, string>>
  /** The message as received. */
  readonly raw: string
}

export type RejectStage = "rcpt" | "data"

export interface RejectRule {
  readonly code: number
  readonly message?: string | undefined
  /** Where to answer: at RCPT TO (default) or after DATA. */
  readonly at?: RejectStage | undefined
  /** Only for recipients this accepts (all when absent). */
  readonly when?: ((recipient: string) => boolean) | undefined
}

export interface SmtpSink {
  /** `smtp://127.0.0.1:<port>` */
  readonly url: string
  readonly port: number
  readonly messages: Array<ReceivedMail>
  /** Answers `code message` to the next `times` mails (default 1) at RCPT (default) or DATA. */
  readonly rejectNext: (code: number, message: string, times?: number, at?: RejectStage) => void
  /** A lasting rule (until removed with the returned function or `clearRejections`). */
  readonly reject: (rule: RejectRule | number) => () => void
  readonly clearRejections: () => void
  /** Forgets the received mails and every rejection. */
  readonly reset: () => void
  /** Resolves once `count` mails have arrived; rejects after `timeoutMs` (default 2 s). */
  readonly waitFor: (count: number, timeoutMs?: number) => Promise<Array<ReceivedMail>>
  readonly close: () => Promise<void>
}

export interface SmtpSinkOptions {
  /** Require AUTH PLAIN/LOGIN with these credentials (AUTH is optional otherwise). */
  readonly auth?: { readonly user: string; readonly pass: string } | undefined
}

const smtpError = (code: number, message: string): SMTPServerError => {
  const error: SMTPServerError = new Error(message)
  error.responseCode = code
  return error
}

export const startSmtpSink = async (options: SmtpSinkOptions = {}): Promise<SmtpSink> => {
  const messages: Array<ReceivedMail> = []
  const once: Array<{ code: number; message: string; at: RejectStage; left: number }> = []
  const rules = new Set<RejectRule>()
  const waiters = new Set<() => void>()

  /** The rejection for this stage and recipient, consuming a one-shot one first. */
  const rejectionFor = (at: RejectStage, recipient: string): SMTPServerError | undefined => {
    const next = once.find((r) => r.at === at)
    if (next !== undefined) {
      next.left -= 1
      if (next.left <= 0) once.splice(once.indexOf(next), 1)
      return smtpError(next.code, next.message)
    }
    for (const rule of rules) {
      if ((rule.at ?? "rcpt") === at && (rule.when === undefined || rule.when(recipient))) {
        return smtpError(rule.code, rule.message ?? (rule.code >= 500 ? "Rejected" : "Try again later"))
      }
    }
    return undefined
  }

  const server = new SMTPServer({
    authOptional: options.auth === undefined,
    // Plain TCP only, so AUTH must be offered without TLS when credentials are required.
    allowInsecureAuth: true,
    disabledCommands: ["STARTTLS"],
    logger: false,
    // No reverse DNS of 127.0.0.1: it only adds latency to every connection.
    disableReverseLookup: true,
    // Pooled clients keep idle connections open; do not wait 30 s for them on close.
    closeTimeout: 100,
    onAuth: (auth, _session, callback) => {
      const expected = options.auth
      if (expected !== undefined && auth.username === expected.user && auth.password === expected.pass) {
        callback(null, { user: auth.username ?? "" })
      } else {
        callback(smtpError(535, "5.7.8 Authentication credentials invalid"))
      }
    },
    onRcptTo: (address, _session, callback) => {
      callback(rejectionFor("rcpt", address.address) ?? null)
    },
    onData: (stream, session, callback) => {
      const chunks: Array<Buffer> = []
      stream.on("data", (chunk: Buffer) => chunks.push(chunk))
      stream.on("end", () => {
        const to = session.envelope.rcptTo.map((r) => r.address)
        const rejection = rejectionFor("data", to[0] ?? "")
        if (rejection !== undefined) return callback(rejection)
        const raw = Buffer.concat(chunks).toString("utf8")
        const from = session.envelope.mailFrom === false ? "" : session.envelope.mailFrom.address
        messages.push({ ...parseMessage(raw), from, to, raw })
        for (const wake of waiters) wake()
        callback(null, "Queued")
      })
    }
  })

  await new Promise<void>((resolve, reject) => {
    server.server.once("error", reject)
    server.listen(0, "127.0.0.1", () => resolve())
  })
  const address = server.server.address()
  if (address === null || typeof address === "string") throw new Error("SMTP sink: no TCP address")
  const port = address.port

  return {
    url: `smtp://127.0.0.1:${port}`,
    port,
    messages,
    rejectNext: (code, message, times = 1, at = "rcpt") => {
      once.push({ code, message, at, left: times })
    },
    reject: (rule) => {
      const r: RejectRule = typeof rule === "number" ? { code: rule } : rule
      rules.add(r)
      return () => {
        rules.delete(r)
      }
    },
    clearRejections: () => {
      once.length = 0
      rules.clear()
    },
    reset: () => {
      messages.length = 0
      once.length = 0
      rules.clear()
    },
    waitFor: (count, timeoutMs = 2000) =>
      new Promise((resolve, reject) => {
        const check = () => {
          if (messages.length < count) return
          clearTimeout(timer)
          waiters.delete(check)
          resolve(messages)
        }
        const timer = setTimeout(() => {
          waiters.delete(check)
          reject(new Error(`SMTP sink: ${messages.length} of ${count} mails after ${timeoutMs} ms`))
        }, timeoutMs)
        waiters.add(check)
        check()
      }),
    close: () =>
      new Promise<void>((resolve) => {
        for (const connection of server.connections) connection.close()
        server.close(() => resolve())
      })
  }
}

/** The sink as a scoped resource: closed with the scope. */
export const smtpSink = (options: SmtpSinkOptions = {}): Effect.Effect<SmtpSink, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(() => startSmtpSink(options)),
    (sink) => Effect.promise(() => sink.close())
  )

// --- A small MIME reader -----------------------------------------------------------------------------

interface Entity {
  readonly headers: Record<string, string>
  readonly body: string
}

/** Splits a message or body part into unfolded headers and the raw body. */
export const splitEntity = (raw: string): Entity => {
  const text = raw.replace(/\r\n/g, "\n")
  const end = text.indexOf("\n\n")
  const head = end === -1 ? text : text.slice(0, end)
  const body = end === -1 ? "" : text.slice(end + 2)
  const headers: Record<string, string> = {}
  for (const line of head.replace(/\n[ \t]+/g, " ").split("\n")) {
    const colon = line.indexOf(":")
    if (colon <= 0) continue
    const name = line.slice(0, colon).trim().toLowerCase()
    const value = line.slice(colon + 1).trim()
    headers[name] = headers[name] === undefined ? value : `${headers[name]}\n${value}`
  }
  return { headers, body }
}

/** A parameter of a structured header (`charset`, `boundary`), unquoted. */
const headerParam = (value: string | undefined, name: string): string | undefined => {
  if (value === undefined) return undefined
  const match = new RegExp(`;\\s*${name}\\s*=\\s*(?:"([^"]*)"|([^;\\s]+))`, "i").exec(value)
  return match === null ? undefined : (match[1] ?? match[2])
}

const decodeBytes = (bytes: Uint8Array, charset: string | undefined): string => {
  try {
    return new TextDecoder(charset ?? "utf-8").decode(bytes)
  } catch {
    return new TextDecoder("utf-8").decode(bytes)
  }
}

/** Quoted-printable to bytes (`underscoreIsSpace` for RFC 2047 Q words). */
const quotedPrintableBytes = (text: string, underscoreIsSpace = false): Uint8Array => {
  const source = (underscoreIsSpace ? text.replace(/_/g, " ") : text).replace(/=\r?\n/g, "")
  const bytes: Array<number> = []
  for (let i = 0; i < source.length; i++) {
    const hex = source.slice(i + 1, i + 3)
    if (source[i] === "=" && /^[0-9A-Fa-f]{2}$/.test(hex)) {
      bytes.push(Number.parseInt(hex, 16))
      i += 2
    } else {
      bytes.push(...Buffer.from(source[i] ?? "", "utf8"))
    }
  }
  return Uint8Array.from(bytes)
}

const ENCODED_WORD = /=\?([^?*]+)(?:\*[^?]*)?\?([BbQq])\?([^?]*)\?=/g
const ENCODED_RUN = /=\?[^?]+\?[BbQq]\?[^?]*\?=(?:\s+=\?[^?]+\?[BbQq]\?[^?]*\?=)*/g

/**
 * RFC 2047 encoded words (`=?utf-8?Q?…?=`, `=?utf-8?B?…?=`). Adjacent words join without the gap
 * between them, and their bytes are decoded together, so a character split across words survives.
 */
export const decodeEncodedWords = (value: string): string =>
  value.replace(ENCODED_RUN, (run) => {
    let out = ""
    let charset: string | undefined
    let pending: Array<Uint8Array> = []
    const flush = () => {
      if (pending.length > 0) out += decodeBytes(Buffer.concat(pending), charset)
      pending = []
    }
    for (const [, wordCharset = "utf-8", encoding = "B", text = ""] of run.matchAll(ENCODED_WORD)) {
      if (charset !== undefined && wordCharset.toLowerCase() !== charset.toLowerCase()) flush()
      charset = wordCharset
      pending.push(
        encoding.toUpperCase() === "B" ? Buffer.from(text, "base64") : quotedPrintableBytes(text, true)
      )
    }
    flush()
    return out
  })

/** The decoded text of an entity: its body, or the first text/plain part of a multipart. */
const textOf = (entity: Entity): string => {
  const contentType = entity.headers["content-type"] ?? "text/plain"
  if (/^multipart\//i.test(contentType)) {
    const boundary = headerParam(contentType, "boundary")
    if (boundary === undefined) return ""
    const parts = entity.body.split(`--${boundary}`).slice(1)
    for (const part of parts) {
      if (part.startsWith("--")) break
      const child = splitEntity(part.replace(/^\n/, ""))
      const childType = child.headers["content-type"] ?? "text/plain"
      if (/^(text\/plain|multipart\/)/i.test(childType)) return textOf(child)
    }
    return ""
  }
  const encoding = (entity.headers["content-transfer-encoding"] ?? "7bit").toLowerCase()
  const charset = headerParam(contentType, "charset")
  const bytes =
    encoding === "base64"
      ? Buffer.from(entity.body.replace(/\s+/g, ""), "base64")
      : encoding === "quoted-printable"
        ? quotedPrintableBytes(entity.body)
        : Buffer.from(entity.body, "utf8")
  const text = decodeBytes(bytes, charset).replace(/\r\n/g, "\n")
  // Outside base64 the last line break is the message's (or part's) framing, not the text's.
  return encoding === "base64" ? text : text.replace(/\n$/, "")
}

/** Headers, subject and text of a raw message. */
export const parseMessage = (raw: string): Pick<ReceivedMail, "subject" | "text" | "headers"> => {
  const entity = splitEntity(raw)
  return {
    headers: entity.headers,
    subject: decodeEncodedWords(entity.headers.subject ?? ""),
    text: textOf(entity)
  }
}

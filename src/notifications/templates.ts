/**
 * Notification templates: the Liquid engine for stored (untrusted) templates, validation at save
 * time, strict rendering, and the built-in template of every trigger (spec §6.5) on every channel.
 *
 * The engine is strict: a plain `{{ missing }}` fails the render (the notification fails with a clear
 * reason instead of sending half a message), while `{% if x %}` and `{{ x | default: "…" }}` tolerate
 * an absent variable (`lenientIf`). Templates cannot read files: the `include`, `render` and `layout`
 * tags are refused when a template is parsed, and the engine's file system refuses every read. Parse
 * length, render time and allocations are bounded (liquidjs's DoS limits). Output is plain text.
 */
import { Data, Effect, Either, Option } from "effect"
import { type FS, Liquid } from "liquidjs"
import type { Channel, Trigger } from "./channels.js"
import { CHANNELS, TRIGGERS } from "./channels.js"

// --- Limits ----------------------------------------------------------------------------------------

export const TEMPLATE_LIMITS = {
  /** A body template, in UTF-8 bytes. */
  bodyBytes: 64 * 1024,
  /** An email subject template: the longest header line RFC 5322 allows. */
  subjectChars: 998,
  /** A push title template. */
  titleChars: 200,
  /** liquidjs `parseLimit`: characters parsed in one `parse()` call (one part). */
  parseChars: 64 * 1024,
  /** liquidjs `renderLimit`: milliseconds one part may take to render. */
  renderMillis: 500,
  /** liquidjs `memoryLimit`: units allocated by ranges, string filters, `json`… in one render. */
  memoryUnits: 10_000_000,
  /** A rendered part longer than this (UTF-8 bytes) fails the render. */
  renderedBytes: 1024 * 1024
} as const

// --- Types -----------------------------------------------------------------------------------------

export type TemplateField = "subject" | "title" | "body"

/** The Liquid sources of a template: `subject` (email), `title` (push), `body` (all channels). */
export interface TemplateParts {
  readonly subject?: string | undefined
  readonly title?: string | undefined
  readonly body: string
}

/** A rendered template: subject and title on one trimmed line, the body as rendered. */
export interface Rendered {
  readonly subject?: string
  readonly title?: string
  readonly body: string
}

/** A template refused at save time: a missing or forbidden part, a part too long, a Liquid error. */
export class TemplateInvalid extends Data.TaggedError("TemplateInvalid")<{
  readonly field: TemplateField
  /** `"<field>: <reason>"`; Liquid errors keep their `line:…, col:…`. */
  readonly message: string
}> {}

/** A render that did not produce a whole message; `message` is kept as the notification's reason. */
export class TemplateRenderFailed extends Data.TaggedError("TemplateRenderFailed")<{
  readonly field: TemplateField
  /** e.g. `body: undefined variable: order.displayId`. */
  readonly message: string
  /** The variable path that was undefined, when that is why the render failed. */
  readonly missingVariable?: string | undefined
}> {}

// --- Money -----------------------------------------------------------------------------------------

const KNOWN_CURRENCIES: ReadonlySet<string> = new Set(Intl.supportedValuesOf("currency"))

interface CurrencyFormat {
  readonly formatter: Intl.NumberFormat
  /** The currency's minor-unit digits: JPY 0, USD 2, KWD 3. */
  readonly digits: number
}

const currencyFormats = new Map<string, CurrencyFormat>()

const currencyFormat = (code: string): CurrencyFormat | undefined => {
  if (!KNOWN_CURRENCIES.has(code)) return undefined
  const cached = currencyFormats.get(code)
  if (cached !== undefined) return cached
  const formatter = new Intl.NumberFormat("en-US", { style: "currency", currency: code })
  const format = { formatter, digits: formatter.resolvedOptions().maximumFractionDigits ?? 2 }
  currencyFormats.set(code, format)
  return format
}

const minorUnits = (amount: unknown): number | undefined => {
  if (typeof amount === "number") return Number.isFinite(amount) ? amount : undefined
  if (typeof amount === "string" && /^\s*-?\d{1,16}\s*$/.test(amount)) return Number(amount)
  return undefined
}

const plainText = (value: unknown): string =>
  value === undefined || value === null ? "" : typeof value === "string" ? value : String(value)

/**
 * Formats an amount in integer minor units with its ISO 4217 currency, `en-US` style:
 * `formatMoney(1999, "USD")` = `"$19.99"`, `(1999, "JPY")` = `"¥1,999"`, `(1234, "KWD")` =
 * `"KWD 1.234"`. An unknown currency (or an amount that is not a number) gives `"<amount> <CUR>"`
 * with the amount as given, since its minor unit is unknown. Non-breaking spaces become plain spaces
 * (plain-text bodies, GSM-7 SMS). Never throws.
 */
export const formatMoney = (amount: unknown, currency?: unknown): string => {
  try {
    const code = typeof currency === "string" ? currency.trim().toUpperCase() : plainText(currency)
    const units = minorUnits(amount)
    const format = /^[A-Z]{3}$/.test(code) ? currencyFormat(code) : undefined
    if (format !== undefined && units !== undefined) {
      return format.formatter.format(units / 10 ** format.digits).replace(/[\u00a0\u202f]/g, " ")
    }
    return [plainText(amount), code].filter((part) => part !== "").join(" ")
  } catch {
    return plainText(amount)
  }
}

// --- The engine ------------------------------------------------------------------------------------

const refuseFileSystem = (path: string) => new Error(`templates cannot read files (${path})`)

/** The engine's file system: nothing exists, every read fails. */
const noFileSystem: FS = {
  exists: () => Promise.resolve(false),
  existsSync: () => false,
  readFile: (path) => Promise.reject(refuseFileSystem(path)),
  readFileSync: (path) => {
    throw refuseFileSystem(path)
  },
  resolve: (_dir, file) => file,
  contains: () => Promise.resolve(false),
  containsSync: () => false
}

/** The tags that read other templates from files: refused when a template is parsed. */
const FILE_TAGS = ["include", "render", "layout"] as const

const makeEngine = (): Liquid => {
  const engine = new Liquid({
    strictVariables: true,
    strictFilters: true,
    ownPropertyOnly: true,
    lenientIf: true,
    fs: noFileSystem,
    root: [],
    partials: [],
    layouts: [],
    relativeReference: false,
    cache: false,
    // Dates render in UTC, whatever the server's zone, with English month names.
    timezoneOffset: 0,
    locale: "en-US",
    parseLimit: TEMPLATE_LIMITS.parseChars,
    renderLimit: TEMPLATE_LIMITS.renderMillis,
    memoryLimit: TEMPLATE_LIMITS.memoryUnits
  })
  for (const tag of FILE_TAGS) {
    const refused = `the "${tag}" tag is not allowed: templates cannot read other templates or files`
    engine.registerTag(tag, {
      parse() {
        throw new Error(refused)
      },
      render() {
        throw new Error(refused)
      }
    })
  }
  engine.registerFilter("money", (value: unknown, currency?: unknown) => formatMoney(value, currency))
  return engine
}

/**
 * The Liquid engine for notification templates: strict variables and filters, own properties only,
 * lenient `if`/`default`, no file system, bounded parse/render/memory, UTC dates, a `money` filter.
 */
export const templateEngine: Liquid = makeEngine()

// --- Errors ----------------------------------------------------------------------------------------

const MAX_MESSAGE_CHARS = 500

/** An error's message on one line, without stack, capped; liquidjs keeps `line:…, col:…` in it. */
const cleanMessage = (error: unknown): string => {
  const raw = error instanceof Error ? error.message : plainText(error)
  const line = raw.replace(/\s+/g, " ").trim() || "unknown template error"
  return line.length > MAX_MESSAGE_CHARS ? `${line.slice(0, MAX_MESSAGE_CHARS - 1)}…` : line
}

/** The variable path of liquidjs's `UndefinedVariableError`, when that is the error. */
const undefinedVariable = (error: unknown): string | undefined => {
  if (!(error instanceof Error) || !("originalError" in error)) return undefined
  const original = error.originalError
  if (typeof original !== "object" || original === null || !("variableName" in original)) return undefined
  return typeof original.variableName === "string" ? original.variableName : undefined
}

const utf8Bytes = (text: string) => Buffer.byteLength(text, "utf8")

// --- Validation ------------------------------------------------------------------------------------

type PartRule = "required" | "forbidden"

/** Which parts each channel's templates have; `body` is required everywhere. */
const CHANNEL_PARTS: Readonly<Record<Channel, Readonly<Record<"subject" | "title", PartRule>>>> = {
  email: { subject: "required", title: "forbidden" },
  sms: { subject: "forbidden", title: "forbidden" },
  push: { subject: "forbidden", title: "required" }
}

const FIELDS: ReadonlyArray<TemplateField> = ["subject", "title", "body"]

const invalid = (field: TemplateField, reason: string) =>
  Either.left(new TemplateInvalid({ field, message: `${field}: ${reason}` }))

const partProblem = (
  channel: Channel,
  field: TemplateField,
  source: string | undefined
): string | undefined => {
  const rule = field === "body" ? "required" : CHANNEL_PARTS[channel][field]
  if (rule === "forbidden") {
    return source === undefined ? undefined : `${channel} templates have no ${field}`
  }
  if (source === undefined || source.trim() === "") return `required for ${channel} templates`
  if (field === "body") {
    const bytes = utf8Bytes(source)
    return bytes > TEMPLATE_LIMITS.bodyBytes
      ? `longer than ${TEMPLATE_LIMITS.bodyBytes} bytes (64 KiB): ${bytes} bytes`
      : undefined
  }
  const max = field === "subject" ? TEMPLATE_LIMITS.subjectChars : TEMPLATE_LIMITS.titleChars
  return source.length > max ? `longer than ${max} characters: ${source.length}` : undefined
}

/**
 * Validates a template for its channel (save time): email has `subject` and `body` and no `title`;
 * sms only `body`; push `title` and `body` and no `subject`. Every part must parse (unknown tags and
 * filters, unclosed blocks, `include`/`render`/`layout` are refused) and respect its length limit.
 * Answers the global variables the template reads (top-level names, sorted, unique).
 */
export const validateTemplate = (
  channel: Channel,
  parts: TemplateParts
): Either.Either<{ readonly variables: ReadonlyArray<string> }, TemplateInvalid> => {
  const variables = new Set<string>()
  for (const field of FIELDS) {
    const source = parts[field]
    const problem = partProblem(channel, field, source)
    if (problem !== undefined) return invalid(field, problem)
    if (source === undefined) continue
    try {
      const parsed = templateEngine.parse(source)
      for (const name of templateEngine.globalVariablesSync(parsed)) variables.add(name)
    } catch (error) {
      return invalid(field, cleanMessage(error))
    }
  }
  return Either.right({ variables: [...variables].sort() })
}

// --- Rendering -------------------------------------------------------------------------------------

/** A header cannot hold a newline: subject and title are rendered onto one trimmed line. */
const oneLine = (text: string) => text.replace(/\s*[\r\n\u2028\u2029]+\s*/g, " ").trim()

const renderPart = (
  field: TemplateField,
  source: string,
  variables: Record<string, unknown>
): Either.Either<string, TemplateRenderFailed> => {
  let output: string
  try {
    output = plainText(templateEngine.renderSync(templateEngine.parse(source), variables))
  } catch (error) {
    const missing = undefinedVariable(error)
    return Either.left(
      missing === undefined
        ? new TemplateRenderFailed({ field, message: `${field}: ${cleanMessage(error)}` })
        : new TemplateRenderFailed({
            field,
            message: `${field}: undefined variable: ${missing}`,
            missingVariable: missing
          })
    )
  }
  const text = field === "body" ? output.trim() : oneLine(output)
  if (text === "")
    return Either.left(new TemplateRenderFailed({ field, message: `${field}: rendered empty` }))
  if (utf8Bytes(text) > TEMPLATE_LIMITS.renderedBytes) {
    return Either.left(
      new TemplateRenderFailed({
        field,
        message: `${field}: rendered longer than ${TEMPLATE_LIMITS.renderedBytes} bytes`
      })
    )
  }
  return Either.right(text)
}

const renderAll = (
  parts: TemplateParts,
  variables: Record<string, unknown>
): Either.Either<Rendered, TemplateRenderFailed> => {
  const rendered: { subject?: string; title?: string; body?: string } = {}
  for (const field of FIELDS) {
    const source = parts[field]
    if (source === undefined) continue
    const result = renderPart(field, source, variables)
    if (Either.isLeft(result)) return Either.left(result.left)
    rendered[field] = result.right
  }
  const { body, ...headers } = rendered
  return body === undefined
    ? Either.left(new TemplateRenderFailed({ field: "body", message: "body: the template has no body" }))
    : Either.right({ ...headers, body })
}

/**
 * Renders every part of a template with strict variables: an undefined variable (outside `if` and
 * `default`) fails the whole render, naming it; so do Liquid errors, the render-time and memory
 * limits, and a part that renders empty. Subject and title come out trimmed on one line; the body
 * trimmed. Never throws: every failure is a `TemplateRenderFailed`.
 */
export const renderTemplate = (
  parts: TemplateParts,
  variables: Record<string, unknown>
): Effect.Effect<Rendered, TemplateRenderFailed> =>
  Effect.suspend(() => {
    try {
      return renderAll(parts, variables)
    } catch (error) {
      return Either.left(new TemplateRenderFailed({ field: "body", message: `body: ${cleanMessage(error)}` }))
    }
  })

/**
 * The render context of a notification: the keys of the event's data object at top level (anything
 * but a plain JSON object gives none), with `extras` (`store`, `event`, …) merged on top.
 */
export const templateContext = (
  eventData: unknown,
  extras: Record<string, unknown>
): Record<string, unknown> => {
  const base: Record<string, unknown> =
    typeof eventData === "object" && eventData !== null && !Array.isArray(eventData) ? { ...eventData } : {}
  return { ...base, ...extras }
}

// --- Built-in templates ----------------------------------------------------------------------------

export interface BuiltInTemplate {
  /** `tpl_builtin_<trigger with "." → "_">_<channel>`. */
  readonly id: string
  readonly name: string
  readonly channel: Channel
  /** The trigger it renders, or the service's own alert it is for (`webhook.disabled`). */
  readonly trigger: Trigger | SystemMessage
  readonly subject?: string
  readonly title?: string
  readonly body: string
  /** The global variables the template reads (guarded optional ones included). */
  readonly variables: ReadonlyArray<string>
}

export const builtInTemplateId = (trigger: Trigger, channel: Channel) =>
  `tpl_builtin_${trigger.replace(/\./g, "_")}_${channel}`

const lines = (...text: ReadonlyArray<string>) => text.join("\n")

// Snippets shared by the built-ins; every optional variable is behind `if` or `default`.
const GREETING = "Hi{% if firstName %} {{ firstName }}{% endif %},"
const SIGN_OFF = lines("Thanks,", '{{ store.name | default: "The team" }}')
const STORE_LINK = "{% if store.url %}\n\n{{ store.url }}{% endif %}"
/** SMS prefix naming the sender: `Acme Store: `. */
const SMS_FROM = "{% if store.name %}{{ store.name }}: {% endif %}"
const LONG_DATE = '"%B %-e, %Y"'
const PLAN = "{% if planName %} to {{ planName }}{% endif %}"

type Copy = Readonly<Record<Channel, TemplateParts>>

const COPY: Readonly<Record<Trigger, Copy>> = {
  "order.confirmed": {
    email: {
      subject: "Your order #{{ displayId }} is confirmed",
      body: lines(
        GREETING,
        "",
        "Thank you for your order! We've received order #{{ displayId }} and it is confirmed.",
        "",
        "Order: #{{ displayId }}",
        `Placed on: {{ createdAt | date: ${LONG_DATE} }}`,
        "Total: {{ total | money: currency }}",
        "",
        `We'll let you know as soon as it ships.${STORE_LINK}`,
        "",
        SIGN_OFF
      )
    },
    sms: {
      body: `${SMS_FROM}Thanks for your order! Order #{{ displayId }} ({{ total | money: currency }}) is confirmed. We'll let you know when it ships.`
    },
    push: {
      title: "Order #{{ displayId }} confirmed",
      body: "Thanks for your order! Total: {{ total | money: currency }}. We'll let you know when it ships."
    }
  },
  "order.shipped": {
    email: {
      subject: "Your order #{{ displayId }} has shipped",
      body: lines(
        GREETING,
        "",
        "Good news: your order #{{ displayId }} is on its way.",
        "",
        "Order: #{{ displayId }}{% if carrier %}",
        "Carrier: {{ carrier }}{% endif %}{% if trackingNumber %}",
        "Tracking number: {{ trackingNumber }}{% endif %}{% if trackingUrl %}",
        `Track your package: {{ trackingUrl }}{% endif %}${STORE_LINK}`,
        "",
        SIGN_OFF
      )
    },
    sms: {
      body: `${SMS_FROM}Your order #{{ displayId }} has shipped.{% if trackingUrl %} Track it: {{ trackingUrl }}{% endif %}`
    },
    push: {
      title: "Order #{{ displayId }} shipped",
      body: "Your order is on its way.{% if carrier %} Carrier: {{ carrier }}.{% endif %}{% if trackingNumber %} Tracking number: {{ trackingNumber }}.{% endif %}"
    }
  },
  "order.delivered": {
    email: {
      subject: "Your order #{{ displayId }} has been delivered",
      body: lines(
        GREETING,
        "",
        "Your order #{{ displayId }} has been delivered. We hope you enjoy it!",
        "",
        `If anything isn't right, please get in touch and we'll be glad to help.${STORE_LINK}`,
        "",
        SIGN_OFF
      )
    },
    sms: { body: `${SMS_FROM}Your order #{{ displayId }} has been delivered. Enjoy!` },
    push: {
      title: "Order #{{ displayId }} delivered",
      body: "Your order has been delivered. We hope you enjoy it!"
    }
  },
  "order.cancelled": {
    email: {
      subject: "Your order #{{ displayId }} has been cancelled",
      body: lines(
        GREETING,
        "",
        "Your order #{{ displayId }} ({{ total | money: currency }}) has been cancelled.",
        "",
        "{% if refundedAmount %}A refund of {{ refundedAmount | money: currency }} is on its way to your original payment method.{% else %}If you were charged, the refund goes back to your original payment method.{% endif %}",
        "",
        `If you have any questions, please get in touch.${STORE_LINK}`,
        "",
        SIGN_OFF
      )
    },
    sms: {
      body: `${SMS_FROM}Your order #{{ displayId }} has been cancelled. Any payment will be refunded to your original payment method.`
    },
    push: {
      title: "Order #{{ displayId }} cancelled",
      body: "Your order has been cancelled. Any payment will be refunded to your original payment method."
    }
  },
  "order.refunded": {
    email: {
      subject: "Your refund for order #{{ displayId }}",
      body: lines(
        GREETING,
        "",
        "We've refunded {% if refundedAmount %}{{ refundedAmount | money: currency }}{% else %}your payment{% endif %} for order #{{ displayId }} (order total {{ total | money: currency }}).",
        "",
        "The refund goes back to your original payment method. Depending on your bank, it may take a few business days to appear on your statement.",
        "",
        SIGN_OFF
      )
    },
    sms: {
      body: `${SMS_FROM}We've refunded {% if refundedAmount %}{{ refundedAmount | money: currency }}{% else %}your payment{% endif %} for order #{{ displayId }}. It may take a few business days to appear.`
    },
    push: {
      title: "Refund for order #{{ displayId }}",
      body: "We've refunded {% if refundedAmount %}{{ refundedAmount | money: currency }}{% else %}your payment{% endif %} to your original payment method."
    }
  },
  "payment.failed": {
    email: {
      subject: "Your payment didn't go through",
      body: lines(
        GREETING,
        "",
        "We couldn't process your payment of {{ amount | money: currency }}{% if orderId %} for order {{ orderId }}{% endif %}.{% if failureMessage %}",
        "",
        "Reason: {{ failureMessage }}{% endif %}",
        "",
        `Please check your payment details or use another payment method.${STORE_LINK}`,
        "",
        SIGN_OFF
      )
    },
    sms: {
      body: `${SMS_FROM}Your payment of {{ amount | money: currency }} didn't go through. Please check your payment details or use another payment method.`
    },
    push: {
      title: "Payment failed",
      body: "Your payment of {{ amount | money: currency }} didn't go through. Please check your payment details."
    }
  },
  "subscription.created": {
    email: {
      subject: `Your subscription${PLAN} has started`,
      body: lines(
        GREETING,
        "",
        `Thank you for subscribing${PLAN}!`,
        "",
        `Status: {{ status | replace: "_", " " }}{% if currentPeriodEnd %}`,
        `Current period ends: {{ currentPeriodEnd | date: ${LONG_DATE} }}{% endif %}${STORE_LINK}`,
        "",
        SIGN_OFF
      )
    },
    sms: { body: `${SMS_FROM}Thank you for subscribing${PLAN}! Your subscription has started.` },
    push: { title: "Subscription started", body: `Thank you for subscribing${PLAN}!` }
  },
  "subscription.renewed": {
    email: {
      subject: `Your subscription${PLAN} has renewed`,
      body: lines(
        GREETING,
        "",
        `Your subscription${PLAN} has renewed.{% if currentPeriodEnd %} It now runs until {{ currentPeriodEnd | date: ${LONG_DATE} }}.{% endif %}`,
        "",
        `Thank you for staying with us.${STORE_LINK}`,
        "",
        SIGN_OFF
      )
    },
    sms: {
      body: `${SMS_FROM}Your subscription${PLAN} has renewed.{% if currentPeriodEnd %} Next period ends {{ currentPeriodEnd | date: ${LONG_DATE} }}.{% endif %}`
    },
    push: {
      title: "Subscription renewed",
      body: `Your subscription${PLAN} has renewed.{% if currentPeriodEnd %} It now runs until {{ currentPeriodEnd | date: ${LONG_DATE} }}.{% endif %}`
    }
  },
  "subscription.cancelled": {
    email: {
      subject: `Your subscription${PLAN} has been cancelled`,
      body: lines(
        GREETING,
        "",
        `Your subscription${PLAN} has been cancelled.`,
        "",
        `We're sorry to see you go. If this was a mistake, you're welcome to subscribe again at any time.${STORE_LINK}`,
        "",
        SIGN_OFF
      )
    },
    sms: { body: `${SMS_FROM}Your subscription${PLAN} has been cancelled. We're sorry to see you go.` },
    push: { title: "Subscription cancelled", body: `Your subscription${PLAN} has been cancelled.` }
  },
  "customer.password_reset": {
    email: {
      subject: "Reset your {% if store.name %}{{ store.name }} {% endif %}password",
      body: lines(
        GREETING,
        "",
        "We received a request to reset the password for {{ email }}. To choose a new password, open this link:",
        "",
        "{{ resetUrl }}",
        "",
        'This link expires on {{ expiresAt | date: "%B %-e, %Y at %H:%M UTC" }}.',
        "",
        "If you didn't ask to reset your password, you can ignore this email; your password won't change.",
        "",
        SIGN_OFF
      )
    },
    sms: {
      body: `${SMS_FROM}Reset your password: {{ resetUrl }} (expires {{ expiresAt | date: "%b %-e %H:%M UTC" }})`
    },
    push: {
      title: "Password reset requested",
      body: 'We sent a link to reset your password to {{ email }}. It expires on {{ expiresAt | date: "%b %-e at %H:%M UTC" }}.'
    }
  }
}

const TRIGGER_NAMES: Readonly<Record<Trigger, string>> = {
  "order.confirmed": "Order confirmed",
  "order.shipped": "Order shipped",
  "order.delivered": "Order delivered",
  "order.cancelled": "Order cancelled",
  "order.refunded": "Order refunded",
  "payment.failed": "Payment failed",
  "subscription.created": "Subscription created",
  "subscription.renewed": "Subscription renewed",
  "subscription.cancelled": "Subscription cancelled",
  "customer.password_reset": "Password reset"
}

const CHANNEL_NAMES: Readonly<Record<Channel, string>> = { email: "email", sms: "SMS", push: "push" }

const makeBuiltIn = (trigger: Trigger, channel: Channel): BuiltInTemplate => {
  const parts = COPY[trigger][channel]
  const validated = validateTemplate(channel, parts)
  if (Either.isLeft(validated)) {
    throw new Error(
      `built-in template ${builtInTemplateId(trigger, channel)} is invalid: ${validated.left.message}`
    )
  }
  return {
    id: builtInTemplateId(trigger, channel),
    name: `${TRIGGER_NAMES[trigger]} (${CHANNEL_NAMES[channel]})`,
    channel,
    trigger,
    ...(parts.subject === undefined ? {} : { subject: parts.subject }),
    ...(parts.title === undefined ? {} : { title: parts.title }),
    body: parts.body,
    variables: validated.right.variables
  }
}

/** The built-in template of every trigger on every channel, in `TRIGGERS` × `CHANNELS` order. */
export const TRIGGER_TEMPLATES: ReadonlyArray<BuiltInTemplate & { readonly trigger: Trigger }> =
  TRIGGERS.flatMap((trigger) => CHANNELS.map((channel) => ({ ...makeBuiltIn(trigger, channel), trigger })))

/** Mail the service sends staff about itself (not a shopper trigger of spec §6.5). */
export type SystemMessage = "webhook.disabled"

/** The email to a webhook endpoint's owner before it is disabled (spec §3.1). */
export const WEBHOOK_DISABLED_TEMPLATE_ID = "tpl_builtin_webhook_disabled_email"

const webhookDisabledTemplate = (): BuiltInTemplate => {
  const parts: TemplateParts = {
    subject: "Webhook endpoint disabled: {{ webhook.url }}",
    body: lines(
      "Your webhook endpoint {{ webhook.url }} ({{ webhook.id }}) at {{ store.name }} is being disabled.",
      "",
      "{{ reason }}",
      "",
      "No new events will be sent to it. To receive them again, fix the endpoint, then re-enable it with",
      'PUT /webhook/{{ webhook.id }} {"status": "active"} and send what it missed with',
      'POST /webhook/{{ webhook.id }}/recover {"since": "{{ webhook.failingSince | default: "<time>" }}"}.'
    )
  }
  const validated = validateTemplate("email", parts)
  if (Either.isLeft(validated))
    throw new Error(`built-in template ${WEBHOOK_DISABLED_TEMPLATE_ID} is invalid: ${validated.left.message}`)
  return {
    id: WEBHOOK_DISABLED_TEMPLATE_ID,
    name: "Webhook endpoint disabled (email)",
    channel: "email",
    trigger: "webhook.disabled",
    subject: "Webhook endpoint disabled: {{ webhook.url }}",
    body: parts.body,
    variables: validated.right.variables
  }
}

/** Every built-in template: the triggers', then the service's own alerts. */
export const BUILT_IN_TEMPLATES: ReadonlyArray<BuiltInTemplate> = [
  ...TRIGGER_TEMPLATES,
  webhookDisabledTemplate()
]

const BUILT_IN_BY_ID: ReadonlyMap<string, BuiltInTemplate> = new Map(
  BUILT_IN_TEMPLATES.map((template) => [template.id, template])
)

/** The built-in template `id`, if there is one. */
export const findBuiltInTemplate = (id: string): Option.Option<BuiltInTemplate> =>
  Option.fromNullable(BUILT_IN_BY_ID.get(id))

/** The built-in template of a trigger on a channel (there is one for every pair). */
export const builtInTemplate = (trigger: Trigger, channel: Channel): (typeof TRIGGER_TEMPLATES)[number] => {
  const id = builtInTemplateId(trigger, channel)
  const template = TRIGGER_TEMPLATES.find((t) => t.id === id)
  if (template === undefined) throw new Error(`no built-in template for ${trigger} on ${channel}`)
  return template
}

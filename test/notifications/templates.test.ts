/**
 * Notification templates (pure, no database): validation per channel, the refused file tags and the
 * limits, variable extraction, strict rendering (missing variables fail and are named, `default` and
 * `if` tolerate absence), the `money` filter, one-line subjects, the built-in template of every trigger
 * on every channel, the render context, and a property: rendering never throws outside the Effect.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Option } from "effect"
import * as fc from "fast-check"
import { CHANNELS, type Channel, TRIGGERS, type Trigger } from "../../src/notifications/channels.js"
import {
  BUILT_IN_TEMPLATES,
  builtInTemplate,
  findBuiltInTemplate,
  formatMoney,
  type Rendered,
  renderTemplate,
  TEMPLATE_LIMITS,
  type TemplateInvalid,
  type TemplateParts,
  type TemplateRenderFailed,
  TRIGGER_TEMPLATES,
  templateContext,
  templateEngine,
  validateTemplate
} from "../../src/notifications/templates.js"

// --- Helpers ---------------------------------------------------------------------------------------

const render = (parts: TemplateParts, variables: Record<string, unknown> = {}) =>
  Effect.runSync(Effect.either(renderTemplate(parts, variables)))

const rendered = (parts: TemplateParts, variables: Record<string, unknown> = {}): Rendered => {
  const result = render(parts, variables)
  if (Either.isLeft(result)) return expect.fail(`render failed: ${result.left.message}`)
  return result.right
}

const renderFailure = (
  parts: TemplateParts,
  variables: Record<string, unknown> = {}
): TemplateRenderFailed => {
  const result = render(parts, variables)
  if (Either.isRight(result)) return expect.fail(`render succeeded: ${JSON.stringify(result.right)}`)
  return result.left
}

const variablesOf = (channel: Channel, parts: TemplateParts): ReadonlyArray<string> => {
  const result = validateTemplate(channel, parts)
  if (Either.isLeft(result)) return expect.fail(`invalid: ${result.left.message}`)
  return result.right.variables
}

const invalidity = (channel: Channel, parts: TemplateParts): TemplateInvalid => {
  const result = validateTemplate(channel, parts)
  if (Either.isRight(result)) return expect.fail("the template was accepted")
  return result.left
}

const store = { name: "Acme Store", url: "https://shop.example.com" }
const event = (type: Trigger) => ({ id: "evt_01HXYZ", type, occurredAt: "2024-05-01T10:00:00.000Z" })

/** Typical public-event data per trigger family: required fields only. */
const REQUIRED_DATA = {
  order: {
    id: "ord_01HXAB",
    displayId: "1001",
    status: "confirmed",
    email: "ada@example.com",
    total: 4999,
    currency: "USD",
    createdAt: "2024-05-01T10:00:00.000Z"
  },
  payment: { id: "pay_01HXAB", amount: 4999, currency: "EUR" },
  subscription: { id: "sub_01HXAB", status: "active" },
  customer: {
    firstName: "Ada",
    lastName: "Lovelace",
    email: "ada@example.com",
    resetToken: "Zm9vYmFyYmF6cXV4cXV1eGZvb2JhcmJhenF1eHF1dXg",
    expiresAt: "2024-05-01T11:00:00.000Z",
    resetUrl: "https://shop.example.com/reset-password?token=Zm9vYmFyYmF6cXV4cXV1eGZvb2JhcmJhenF1eHF1dXg"
  }
} as const

/** The same with the optional fields the built-ins may show. */
const FULL_DATA = {
  order: {
    ...REQUIRED_DATA.order,
    firstName: "Ada",
    carrier: "UPS",
    trackingNumber: "1Z999AA10123456784",
    trackingUrl: "https://track.example.com/1Z999AA10123456784",
    refundedAmount: 4999
  },
  payment: { ...REQUIRED_DATA.payment, orderId: "ord_01HXAB", failureMessage: "Your card was declined." },
  subscription: {
    ...REQUIRED_DATA.subscription,
    planName: "Pro Monthly",
    currentPeriodEnd: "2024-06-01T00:00:00.000Z"
  },
  customer: REQUIRED_DATA.customer
} as const

const family = (trigger: Trigger): keyof typeof REQUIRED_DATA => {
  const prefix = trigger.split(".")[0]
  switch (prefix) {
    case "order":
    case "payment":
    case "subscription":
    case "customer":
      return prefix
    default:
      return expect.fail(`no data for ${trigger}`)
  }
}

const contextFor = (trigger: Trigger, data: typeof REQUIRED_DATA | typeof FULL_DATA = FULL_DATA) =>
  templateContext(data[family(trigger)], { store, event: event(trigger) })

// --- Validation ------------------------------------------------------------------------------------

describe("validateTemplate", () => {
  it("accepts each channel's shape and answers the variables", () => {
    expect(variablesOf("email", { subject: "Hi {{ name }}", body: "Total {{ total }}" })).toEqual([
      "name",
      "total"
    ])
    expect(variablesOf("sms", { body: "Code {{ code }}" })).toEqual(["code"])
    expect(variablesOf("push", { title: "{{ title }}", body: "{{ body }}" })).toEqual(["body", "title"])
  })

  it("email requires a subject and a body and has no title", () => {
    expect(invalidity("email", { body: "x" })).toMatchObject({
      _tag: "TemplateInvalid",
      field: "subject",
      message: "subject: required for email templates"
    })
    expect(invalidity("email", { subject: "  ", body: "x" }).field).toBe("subject")
    expect(invalidity("email", { subject: "s", body: "" })).toMatchObject({
      field: "body",
      message: "body: required for email templates"
    })
    expect(invalidity("email", { subject: "s", title: "t", body: "x" })).toMatchObject({
      field: "title",
      message: "title: email templates have no title"
    })
  })

  it("sms has only a body", () => {
    expect(invalidity("sms", { title: "t", body: "x" })).toMatchObject({
      field: "title",
      message: "title: sms templates have no title"
    })
    expect(invalidity("sms", { subject: "s", body: "x" }).field).toBe("subject")
    expect(invalidity("sms", { body: " \n " }).field).toBe("body")
  })

  it("push requires a title and a body and has no subject", () => {
    expect(invalidity("push", { body: "x" })).toMatchObject({
      field: "title",
      message: "title: required for push templates"
    })
    expect(invalidity("push", { subject: "s", title: "t", body: "x" }).field).toBe("subject")
    expect(Either.isRight(validateTemplate("push", { title: "t", body: "x" }))).toBe(true)
  })

  it("a syntax error is refused with liquidjs's message, its position and no stack", () => {
    const unclosed = invalidity("sms", { body: "Hello\n{% if vip %}VIP" })
    expect(unclosed.field).toBe("body")
    expect(unclosed.message).toBe("body: tag {% if vip %} not closed, line:2, col:1")

    const output = invalidity("email", { subject: "Order {{ displayId", body: "x" })
    expect(output.field).toBe("subject")
    expect(output.message).toMatch(/^subject: output "\{\{ displayId" not closed, line:1, col:7$/)

    expect(invalidity("sms", { body: "{% frobnicate %}" }).message).toBe(
      'body: tag "frobnicate" not found, line:1, col:1'
    )
    for (const error of [unclosed, output]) {
      expect(error.message).not.toContain("\n")
      expect(error.message).not.toMatch(/\bat .*\(/)
    }
  })

  it("unknown filters are refused (strictFilters)", () => {
    expect(invalidity("sms", { body: "{{ name | shout }}" }).message).toBe(
      "body: undefined filter: shout, line:1, col:1"
    )
  })

  it("include, render and layout are refused: templates cannot read files", () => {
    for (const tag of ["include", "render", "layout"]) {
      const error = invalidity("sms", { body: `Hi\n{% ${tag} 'package.json' %}` })
      expect(error.field).toBe("body")
      expect(error.message).toContain(`the "${tag}" tag is not allowed`)
      expect(error.message).toContain("line:2, col:1")
    }
    // Also inside a `liquid` tag, and in the subject.
    expect(invalidity("sms", { body: "{% liquid\n  echo 1\n  render 'x' %}" }).message).toContain(
      'the "render" tag is not allowed'
    )
    expect(invalidity("email", { subject: "{% include '/etc/passwd' %}", body: "x" }).field).toBe("subject")
  })

  it("enforces the length limits: body 64 KiB (bytes), subject 998, title 200", () => {
    const kib64 = TEMPLATE_LIMITS.bodyBytes
    expect(Either.isRight(validateTemplate("sms", { body: "x".repeat(kib64) }))).toBe(true)
    expect(invalidity("sms", { body: "x".repeat(kib64 + 1) }).message).toBe(
      "body: longer than 65536 bytes (64 KiB): 65537 bytes"
    )
    // Counted in UTF-8 bytes: 40,000 "é" are 80,000 bytes.
    expect(invalidity("sms", { body: "é".repeat(40_000) }).field).toBe("body")

    expect(Either.isRight(validateTemplate("email", { subject: "s".repeat(998), body: "x" }))).toBe(true)
    expect(invalidity("email", { subject: "s".repeat(999), body: "x" })).toMatchObject({
      field: "subject",
      message: "subject: longer than 998 characters: 999"
    })
    expect(Either.isRight(validateTemplate("push", { title: "t".repeat(200), body: "x" }))).toBe(true)
    expect(invalidity("push", { title: "t".repeat(201), body: "x" }).field).toBe("title")
  })

  it("variables: top-level names read from the context, sorted and unique, across all parts", () => {
    const variables = variablesOf("email", {
      subject: "Order #{{ order.displayId }} for {{ customer.firstName | default: 'you' }}",
      body: [
        "{% assign greeting = 'Hello' %}{{ greeting }} {{ customer.lastName }}",
        "{% for line in order.lines %}{{ line.name }} × {{ line.quantity }} {{ forloop.index }}{% endfor %}",
        "{% if vip %}VIP{% endif %}{% capture total %}{{ order.total | money: order.currency }}{% endcapture %}",
        "{{ total }} {{ store['name'] }}"
      ].join("\n")
    })
    expect(variables).toEqual(["customer", "order", "store", "vip"])
  })
})

// --- Rendering -------------------------------------------------------------------------------------

describe("renderTemplate", () => {
  it.effect("renders every part; nested paths resolve", () =>
    Effect.gen(function* () {
      const result = yield* renderTemplate(
        {
          subject: "Order #{{ order.displayId }}",
          body: "Hi {{ customer.name.first }}, {{ order.lines[0].sku }}"
        },
        { order: { displayId: "1001", lines: [{ sku: "TSHIRT-M" }] }, customer: { name: { first: "Ada" } } }
      )
      expect(result).toEqual({ subject: "Order #1001", body: "Hi Ada, TSHIRT-M" })
    })
  )

  it("an undefined variable fails the render and is named", () => {
    const missing = renderFailure(
      { body: "Order #{{ order.displayId }} confirmed" },
      { order: { id: "ord_1" } }
    )
    expect(missing).toMatchObject({
      _tag: "TemplateRenderFailed",
      field: "body",
      message: "body: undefined variable: order.displayId",
      missingVariable: "order.displayId"
    })
    expect(renderFailure({ body: "Hi {{ firstName }}" })).toMatchObject({
      message: "body: undefined variable: firstName",
      missingVariable: "firstName"
    })
    // Inside blocks and loops too.
    expect(
      renderFailure(
        { body: "{% for l in lines %}{% if true %}{{ l.sku }}{% endif %}{% endfor %}" },
        { lines: [{}] }
      ).missingVariable
    ).toBe("l.sku")
  })

  it("never returns half a message: a failing body fails a subject that rendered", () => {
    const failure = renderFailure({ subject: "Hello {{ name }}", body: "{{ missing }}" }, { name: "Ada" })
    expect(failure.field).toBe("body")
    expect(renderFailure({ subject: "{{ missing }}", body: "fine" }).field).toBe("subject")
    expect(renderFailure({ title: "{{ gone.deep }}", body: "fine" })).toMatchObject({
      field: "title",
      // liquidjs names the path up to the first segment that is missing.
      message: "title: undefined variable: gone",
      missingVariable: "gone"
    })
  })

  it("`default` and `if` tolerate an absent variable; null is a value", () => {
    expect(
      rendered({
        body: "Hi {{ firstName | default: 'there' }}{% if vip %} (VIP){% endif %}{% unless gift %}.{% endunless %}"
      }).body
    ).toBe("Hi there.")
    expect(rendered({ body: "{{ order.tracking.url | default: 'none' }}" }, { order: {} }).body).toBe("none")
    expect(rendered({ body: "{% if a.b.c %}yes{% else %}no{% endif %}" }).body).toBe("no")
    expect(rendered({ body: "[{{ nickname }}]" }, { nickname: null }).body).toBe("[]")
  })

  it("only own properties are reachable", () => {
    expect(renderFailure({ body: "{{ order.constructor }}" }, { order: {} }).missingVariable).toBe(
      "order.constructor"
    )
    expect(renderFailure({ body: "{{ order.toString }}" }, { order: { id: 1 } }).missingVariable).toBe(
      "order.toString"
    )
  })

  it("a subject or title is trimmed onto one line; the body keeps its lines", () => {
    const result = rendered(
      { subject: "  Hello\n{{ name }}\r\n  and welcome \n", title: "A\n\nB", body: "\nLine 1\nLine 2\n\n" },
      { name: "Ada" }
    )
    expect(result.subject).toBe("Hello Ada and welcome")
    expect(result.title).toBe("A B")
    expect(result.body).toBe("Line 1\nLine 2")
    // Newlines brought in by the data are collapsed too.
    expect(
      rendered({ subject: "Re: {{ s }}", body: "x" }, { s: "one\r\nBcc: evil@example.com" }).subject
    ).toBe("Re: one Bcc: evil@example.com")
  })

  it("a part that renders empty fails", () => {
    expect(renderFailure({ subject: "{% if vip %}VIP{% endif %}", body: "x" })).toMatchObject({
      field: "subject",
      message: "subject: rendered empty"
    })
  })

  it("the date filter keeps working, in UTC", () => {
    expect(
      rendered(
        { body: "{{ at | date: '%Y-%m-%d %H:%M' }} / {{ at | date: '%B %-e, %Y' }}" },
        {
          at: "2024-05-01T23:30:00.000Z"
        }
      ).body
    ).toBe("2024-05-01 23:30 / May 1, 2024")
  })

  it("a template that reaches for files fails instead of reading them", () => {
    expect(renderFailure({ body: "{% include 'package.json' %}" }).message).toContain(
      'the "include" tag is not allowed'
    )
    expect(renderFailure({ body: "{% render '/etc/passwd' %}" }).field).toBe("body")
    // The engine's own file loading finds nothing either.
    expect(() => templateEngine.parseFileSync("package.json")).toThrow()
    expect(() => templateEngine.renderFileSync("/etc/hostname")).toThrow()
  })

  it("rendering is bounded: memory and time limits fail the render", () => {
    expect(renderFailure({ body: "{% for i in (1..100000000) %}x{% endfor %}" }).message).toContain(
      "memory alloc limit exceeded"
    )
    const started = performance.now()
    const slow = renderFailure({
      body: "{% for i in (1..1000) %}{% for j in (1..1000) %}{% for k in (1..1000) %}x{% endfor %}{% endfor %}{% endfor %}"
    })
    expect(slow.message).toContain("template render limit exceeded")
    expect(performance.now() - started).toBeLessThan(TEMPLATE_LIMITS.renderMillis * 4)
  })

  it("errors that are not Liquid's stay inside the Effect", () => {
    const hostile: Record<string, unknown> = {}
    Object.defineProperty(hostile, "boom", {
      enumerable: true,
      get() {
        throw new Error("getter exploded")
      }
    })
    expect(renderFailure({ body: "{{ boom }}" }, hostile).message).toContain("getter exploded")
    expect(renderFailure({ body: "{% if true %}".repeat(20_000) }).field).toBe("body")
  })
})

// --- Money -----------------------------------------------------------------------------------------

describe("money filter", () => {
  it("formats integer minor units with the currency's own digits", () => {
    expect(formatMoney(1999, "USD")).toBe("$19.99")
    expect(formatMoney(123456789, "USD")).toBe("$1,234,567.89")
    expect(formatMoney(1999, "JPY")).toBe("¥1,999")
    expect(formatMoney(1234, "KWD")).toBe("KWD 1.234")
    expect(formatMoney(1050, "EUR")).toBe("€10.50")
    expect(formatMoney(-500, "USD")).toBe("-$5.00")
    expect(formatMoney(1999, "usd")).toBe("$19.99")
    expect(formatMoney("1999", "USD")).toBe("$19.99")
  })

  it("falls back to '<amount> <CUR>' for an unknown currency or a non-numeric amount", () => {
    expect(formatMoney(1999, "XYZ")).toBe("1999 XYZ")
    expect(formatMoney(1999, "dollars")).toBe("1999 DOLLARS")
    expect(formatMoney("lots", "USD")).toBe("lots USD")
    expect(formatMoney(1999, undefined)).toBe("1999")
    expect(formatMoney(Number.NaN, "USD")).toBe("NaN USD")
  })

  it("is available in templates as `| money: currency`", () => {
    const body = "{{ a | money: 'USD' }} {{ b | money: cur }} {{ c | money: 'KWD' }} {{ d | money: 'QQQ' }}"
    expect(rendered({ body }, { a: 1999, b: 1999, cur: "JPY", c: 1234, d: 7 }).body).toBe(
      "$19.99 ¥1,999 KWD 1.234 7 QQQ"
    )
  })
})

// --- Built-in templates ----------------------------------------------------------------------------

describe("built-in templates", () => {
  it("exist for every trigger on every channel, with stable ids", () => {
    expect(TRIGGER_TEMPLATES).toHaveLength(TRIGGERS.length * CHANNELS.length)
    // …and the service's own alert (the webhook owner's email).
    expect(BUILT_IN_TEMPLATES.map((t) => t.id)).toEqual([
      ...TRIGGER_TEMPLATES.map((t) => t.id),
      "tpl_builtin_webhook_disabled_email"
    ])
    expect(new Set(BUILT_IN_TEMPLATES.map((t) => t.id)).size).toBe(BUILT_IN_TEMPLATES.length)
    for (const trigger of TRIGGERS) {
      for (const channel of CHANNELS) {
        const template = builtInTemplate(trigger, channel)
        expect(template.id).toBe(`tpl_builtin_${trigger.replace(".", "_")}_${channel}`)
        expect(template).toMatchObject({ trigger, channel })
        expect(template.name).not.toBe("")
        expect(Option.getOrThrow(findBuiltInTemplate(template.id))).toBe(template)
      }
    }
    expect(builtInTemplate("order.confirmed", "email").id).toBe("tpl_builtin_order_confirmed_email")
    expect(builtInTemplate("customer.password_reset", "sms").id).toBe(
      "tpl_builtin_customer_password_reset_sms"
    )
    expect(Option.isNone(findBuiltInTemplate("tpl_builtin_nope_email"))).toBe(true)
  })

  it("each validates for its channel and lists the variables it reads", () => {
    for (const template of BUILT_IN_TEMPLATES) {
      const result = validateTemplate(template.channel, template)
      if (Either.isLeft(result)) return expect.fail(`${template.id}: ${result.left.message}`)
      expect(result.right.variables, template.id).toEqual(template.variables)
      expect(template.subject === undefined, template.id).toBe(template.channel !== "email")
      expect(template.title === undefined, template.id).toBe(template.channel !== "push")
    }
  })

  const renderBuiltIn = (
    template: (typeof TRIGGER_TEMPLATES)[number],
    data: typeof REQUIRED_DATA | typeof FULL_DATA
  ) => {
    const result = render(template, contextFor(template.trigger, data))
    if (Either.isLeft(result)) return expect.fail(`${template.id}: ${result.left.message}`)
    return result.right
  }

  it("each renders with typical data, and with only the required fields", () => {
    for (const template of TRIGGER_TEMPLATES) {
      for (const data of [FULL_DATA, REQUIRED_DATA]) {
        const result = renderBuiltIn(template, data)
        expect(result.body, template.id).not.toMatch(/\{\{|\{%/)
        if (template.channel === "email") expect(result.subject, template.id).toBeTruthy()
        if (template.channel === "push") expect(result.title, template.id).toBeTruthy()
      }
      // Without `store` either: only the event's own fields are relied on.
      const bare = render(template, templateContext(REQUIRED_DATA[family(template.trigger)], {}))
      expect(Either.isRight(bare), template.id).toBe(true)
    }
  })

  it("SMS built-ins stay within one 160-character message with typical data", () => {
    for (const template of TRIGGER_TEMPLATES.filter((t) => t.channel === "sms")) {
      for (const data of [FULL_DATA, REQUIRED_DATA]) {
        const body = renderBuiltIn(template, data).body
        expect(body.length, `${template.id}: ${body}`).toBeLessThanOrEqual(160)
        expect(body, template.id).not.toContain("\n")
      }
    }
  })

  it("the password-reset email carries the reset link and says when it expires", () => {
    const result = renderBuiltIn(builtInTemplate("customer.password_reset", "email"), FULL_DATA)
    expect(result.subject).toBe("Reset your Acme Store password")
    expect(result.body).toContain(FULL_DATA.customer.resetUrl)
    expect(result.body).toContain("expires on May 1, 2024 at 11:00 UTC")
    expect(result.body).toContain("Hi Ada,")
    const sms = renderBuiltIn(builtInTemplate("customer.password_reset", "sms"), FULL_DATA)
    expect(sms.body).toContain(FULL_DATA.customer.resetUrl)
  })

  it("the order-confirmed email shows the display id and the formatted total", () => {
    const result = renderBuiltIn(builtInTemplate("order.confirmed", "email"), FULL_DATA)
    expect(result.subject).toBe("Your order #1001 is confirmed")
    expect(result.body).toContain("#1001")
    expect(result.body).toContain("$49.99")
    expect(result.body).toContain("Placed on: May 1, 2024")
    const yen = render(builtInTemplate("order.confirmed", "push"), {
      ...contextFor("order.confirmed"),
      total: 5000,
      currency: "JPY"
    })
    expect(Either.getOrThrow(yen).body).toContain("¥5,000")
  })

  it("optional fields show when present and are skipped when absent", () => {
    const shipped = builtInTemplate("order.shipped", "email")
    expect(renderBuiltIn(shipped, FULL_DATA).body).toContain(
      "Track your package: https://track.example.com/1Z999AA10123456784"
    )
    expect(renderBuiltIn(shipped, REQUIRED_DATA).body).not.toContain("Track")
    const failed = builtInTemplate("payment.failed", "email")
    expect(renderBuiltIn(failed, FULL_DATA).body).toContain("Reason: Your card was declined.")
    expect(renderBuiltIn(failed, FULL_DATA).body).toContain("€49.99")
    expect(renderBuiltIn(failed, REQUIRED_DATA).body).not.toContain("Reason")
    const renewed = builtInTemplate("subscription.renewed", "email")
    expect(renderBuiltIn(renewed, FULL_DATA).subject).toBe("Your subscription to Pro Monthly has renewed")
    expect(renderBuiltIn(renewed, REQUIRED_DATA).subject).toBe("Your subscription has renewed")
  })

  it("a built-in fails, naming the field, when a required variable is missing", () => {
    const { displayId: _omitted, ...withoutDisplayId } = REQUIRED_DATA.order
    const failure = renderFailure(
      builtInTemplate("order.confirmed", "email"),
      templateContext(withoutDisplayId, {})
    )
    expect(failure).toMatchObject({ field: "subject", missingVariable: "displayId" })
  })

  it("property: rendering arbitrary strings into a built-in never throws outside the Effect", () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...BUILT_IN_TEMPLATES),
        fc.dictionary(fc.string(), fc.string()),
        fc.string(),
        (template, extra, value) => {
          const variables: Record<string, unknown> = { ...extra }
          for (const name of template.variables) variables[name] = value
          const result = render(template, variables)
          // Either a whole message or a clean failure; nothing escapes.
          if (Either.isLeft(result)) expect(result.left._tag).toBe("TemplateRenderFailed")
          else expect(typeof result.right.body).toBe("string")
        }
      ),
      { numRuns: 300 }
    )
  })

  it("property: arbitrary template sources never throw outside the Effect", () => {
    fc.assert(
      fc.property(fc.string(), fc.jsonValue(), (source, value) => {
        const result = render({ subject: source, body: `${source}{{ v }}` }, { v: value })
        expect(Either.isLeft(result) || typeof result.right.body === "string").toBe(true)
        expect(() => validateTemplate("email", { subject: source, body: source })).not.toThrow()
      }),
      { numRuns: 300 }
    )
  })
})

// --- Context ---------------------------------------------------------------------------------------

describe("templateContext", () => {
  it("puts the event data's keys at top level and merges extras on top", () => {
    const context = templateContext(
      { id: "ord_1", displayId: "1001", store: "from data" },
      { store, event: event("order.confirmed") }
    )
    expect(context).toEqual({ id: "ord_1", displayId: "1001", store, event: event("order.confirmed") })
  })

  it("anything but a JSON object gives no keys", () => {
    for (const data of [null, undefined, 42, "text", true, [1, 2]]) {
      expect(templateContext(data, { store })).toEqual({ store })
    }
  })

  it("a `__proto__` key in the data stays a plain key", () => {
    const context = templateContext(JSON.parse('{"__proto__": {"polluted": true}, "id": "x"}'), {})
    expect(Object.getPrototypeOf(context)).toBe(Object.prototype)
    expect(context.id).toBe("x")
    expect(rendered({ body: "{{ polluted | default: 'clean' }}" }, context).body).toBe("clean")
  })
})

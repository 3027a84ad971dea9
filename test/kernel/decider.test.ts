import { describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import { uuidv7FromMillis, uuidv7Millis } from "../../src/base/Uuid.js"
import { fold } from "../../src/kernel/Decider.js"
import * as Ids from "../../src/kernel/Ids.js"
import * as Money from "../../src/kernel/Money.js"
import { deciderSpec } from "../support/decider.js"
import { AccountDecider, AccountDeposited, AccountOpened } from "../support/sample.js"

describe("decider (pure, no database)", () => {
  const account = deciderSpec(AccountDecider)
  const opened = AccountOpened.make({ accountId: "a1", owner: "Ann", currency: "USD" })

  it("decides and folds", () => {
    account.when({ _tag: "Open", accountId: "a1", owner: "Ann", currency: "USD" }).thenEvents([opened])
    const state = fold(AccountDecider, [opened, AccountDeposited.make({ accountId: "a1", amount: 500 })])
    expect(state).toEqual({ status: "open", accountId: "a1", owner: "Ann", balance: 500 })
    account.givenState(state).when({ _tag: "Withdraw", accountId: "a1", amount: 501 }).thenFails()
    account
      .givenState(state)
      .when({ _tag: "Open", accountId: "a1", owner: "Bob", currency: "USD" })
      .thenFails("AccountExists")
  })

  it("the given/when/then helper fails a test whose outcome is not the expected one", () => {
    const open = { _tag: "Open", accountId: "a1", owner: "Ann", currency: "USD" } as const
    expect(() => account.when(open).thenFails()).toThrow(/succeeded/)
    expect(() => account.given([opened]).when(open).thenEvents([opened])).toThrow(/AccountExists/)
    expect(() => account.given([opened]).when(open).thenFails("AccountIsClosed")).toThrow()
    expect(() => account.when(open).thenNothing()).toThrow()
    expect(() => account.when(open).thenState(AccountDecider.initialState)).toThrow()
    expect(
      account
        .given([opened])
        .when(open)
        .thenFails((e) => e._tag === "AccountExists")._tag
    ).toBe("AccountExists")
  })

  it("closing twice decides nothing the second time", () => {
    const closed = fold(AccountDecider, [AccountOpened.make({ accountId: "a", owner: "x", currency: "EUR" })])
    const first = account.givenState(closed).when({ _tag: "Close", accountId: "a" }).events
    expect(first.length).toBe(1)
    account
      .givenState(fold(AccountDecider, first, closed))
      .when({ _tag: "Close", accountId: "a" })
      .thenNothing()
  })
})

describe("ids", () => {
  it("are prefixed, time-ordered, 26 base32 chars, and round-trip to the UUID", () => {
    const uuid = uuidv7FromMillis(1_700_000_000_000)
    const id = Ids.fromUuid("cus", uuid)
    expect(id).toMatch(/^cus_[0-7][0-9a-hjkmnp-tv-z]{25}$/)
    expect(Ids.toUuid("cus", id)).toBe(uuid)
    expect(uuidv7Millis(uuid)).toBe(1_700_000_000_000)
    const later = Ids.fromUuid("cus", uuidv7FromMillis(1_700_000_000_001))
    expect(later > id).toBe(true)
  })

  it("reject wrong prefixes and malformed bodies", () => {
    const id = Ids.fromUuid("ord", uuidv7FromMillis(Date.now()))
    expect(Ids.isValid("ord", id)).toBe(true)
    expect(Ids.isValid("cus", id)).toBe(false)
    expect(Ids.isValid("ord", `${id}x`)).toBe(false)
    expect(Ids.isValid("ord", "ord_8zzzzzzzzzzzzzzzzzzzzzzzzz")).toBe(false)
    expect(Ids.isValid("ord", "ord_0123456789abcdefghjkmnpqri")).toBe(false)
    expect(Ids.toUuid("ord", "nonsense")).toBeUndefined()
  })

  it.effect("make uses the Clock", () =>
    Effect.gen(function* () {
      const id = yield* Ids.make("evt")
      const uuid = Ids.toUuid("evt", id)
      expect(uuid && uuidv7Millis(uuid)).toBe(0) // TestClock starts at the epoch
    })
  )
})

describe("money", () => {
  const usd = Money.money(1999, "USD" as Money.Currency)
  it("adds, subtracts and refuses mixed currencies and negatives", () => {
    expect(Money.add(usd, usd)).toEqual(Either.right(Money.money(3998, usd.currency)))
    expect(Either.isLeft(Money.add(usd, Money.money(1, "EUR" as Money.Currency)))).toBe(true)
    expect(Either.isLeft(Money.subtract(Money.money(1, usd.currency), usd))).toBe(true)
    expect(Money.times(usd, 3)).toEqual(Either.right(Money.money(5997, usd.currency)))
    expect(Either.isLeft(Money.times(usd, 1.5))).toBe(true)
    expect(Money.sum(usd.currency, [usd, usd, usd])).toEqual(Either.right(Money.money(5997, usd.currency)))
  })
  it("formats by the currency's minor units", () => {
    expect(Money.toDecimalString(usd)).toBe("19.99")
    expect(Money.toDecimalString(Money.money(5, "USD" as Money.Currency))).toBe("0.05")
    expect(Money.toDecimalString(Money.money(500, "JPY" as Money.Currency))).toBe("500")
    expect(Money.toDecimalString(Money.money(1234, "KWD" as Money.Currency))).toBe("1.234")
  })
})

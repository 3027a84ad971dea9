/**
 * Period arithmetic (research §4.1), as properties over random anchors and intervals, month ends and
 * leap years included: period N is computed from the anchor; periods are contiguous; a month-based
 * boundary keeps the anchor's day, clamped to the month's last day, and never drifts.
 */
import * as fc from "fast-check"
import { describe, expect, it } from "vitest"
import {
  addMonths,
  boundary,
  INTERVALS,
  periodAt,
  periodIndexOf,
  type Recurrence
} from "../../src/billing/periods.js"

const DAY = 86_400_000

const anchors = fc.oneof(
  fc.date({
    min: new Date("1999-01-01T00:00:00Z"),
    max: new Date("2099-12-31T23:59:59Z"),
    noInvalidDate: true
  }),
  // Month ends and leap days, at any time of day.
  fc
    .record({
      year: fc.integer({ min: 1999, max: 2099 }),
      month: fc.integer({ min: 0, max: 11 }),
      back: fc.integer({ min: 0, max: 3 }),
      ms: fc.integer({ min: 0, max: DAY - 1 })
    })
    .map(({ year, month, back, ms }) => new Date(Date.UTC(year, month + 1, 0 - back) + ms))
)

const recurrences: fc.Arbitrary<Recurrence> = fc.record({
  interval: fc.constantFrom(...INTERVALS),
  intervalCount: fc.integer({ min: 1, max: 12 })
})

const daysIn = (year: number, month: number) => new Date(Date.UTC(year, month + 1, 0)).getUTCDate()

describe("billing periods", () => {
  it("the documented month-end sequence: Jan 31 → Feb 28/29 → Mar 31", () => {
    const jan31 = new Date("2024-01-31T10:00:00Z")
    const monthly: Recurrence = { interval: "month", intervalCount: 1 }
    expect([0, 1, 2, 3].map((n) => boundary(jan31, monthly, n).toISOString())).toEqual([
      "2024-01-31T10:00:00.000Z",
      "2024-02-29T10:00:00.000Z",
      "2024-03-31T10:00:00.000Z",
      "2024-04-30T10:00:00.000Z"
    ])
    expect(boundary(new Date("2025-01-31T00:00:00Z"), monthly, 1).toISOString()).toBe(
      "2025-02-28T00:00:00.000Z"
    )
    const leapDay = new Date("2024-02-29T12:00:00Z")
    const yearly: Recurrence = { interval: "year", intervalCount: 1 }
    expect([1, 4].map((n) => boundary(leapDay, yearly, n).toISOString())).toEqual([
      "2025-02-28T12:00:00.000Z",
      "2028-02-29T12:00:00.000Z"
    ])
  })

  it("period N is [boundary N, boundary N+1), contiguous, strictly increasing, and found again by index", () => {
    fc.assert(
      fc.property(anchors, recurrences, fc.integer({ min: 0, max: 60 }), (anchor, rec, n) => {
        const p = periodAt(anchor, rec, n)
        const next = periodAt(anchor, rec, n + 1)
        expect(p.end.getTime()).toBe(next.start.getTime())
        expect(p.start.getTime()).toBeLessThan(p.end.getTime())
        expect(periodAt(anchor, rec, 0).start.getTime()).toBe(anchor.getTime())
        expect(periodIndexOf(anchor, rec, p.start)).toBe(n)
        expect(periodIndexOf(anchor, rec, new Date(p.end.getTime() - 1))).toBe(n)
      }),
      { numRuns: 500 }
    )
  })

  it("day and week periods are exact lengths; month and year keep the time of day and clamp the day", () => {
    fc.assert(
      fc.property(anchors, recurrences, fc.integer({ min: 0, max: 60 }), (anchor, rec, n) => {
        const at = boundary(anchor, rec, n)
        const steps = n * rec.intervalCount
        if (rec.interval === "day" || rec.interval === "week") {
          expect(at.getTime() - anchor.getTime()).toBe(steps * (rec.interval === "day" ? DAY : 7 * DAY))
          return
        }
        const months = rec.interval === "month" ? steps : steps * 12
        const total = anchor.getUTCFullYear() * 12 + anchor.getUTCMonth() + months
        const year = Math.floor(total / 12)
        const month = total % 12
        expect(at.getUTCFullYear()).toBe(year)
        expect(at.getUTCMonth()).toBe(month)
        expect(at.getUTCDate()).toBe(Math.min(anchor.getUTCDate(), daysIn(year, month)))
        expect(at.getTime() % DAY).toBe(anchor.getTime() % DAY)
      }),
      { numRuns: 500 }
    )
  })

  it("computed from the anchor, never from the previous end: no drift to the 28th", () => {
    fc.assert(
      fc.property(anchors, fc.integer({ min: 1, max: 48 }), (anchor, n) => {
        // Chaining from each previous end drifts (Jan 31 → Feb 28 → Mar 28); from the anchor it does not.
        const fromAnchor = addMonths(anchor, n)
        const expectedDay = Math.min(
          anchor.getUTCDate(),
          daysIn(fromAnchor.getUTCFullYear(), fromAnchor.getUTCMonth())
        )
        expect(fromAnchor.getUTCDate()).toBe(expectedDay)
        expect(boundary(anchor, { interval: "month", intervalCount: 1 }, n).getTime()).toBe(
          fromAnchor.getTime()
        )
      }),
      { numRuns: 500 }
    )
  })
})

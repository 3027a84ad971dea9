/**
 * Billing periods (research §4.1), pure: a period is `interval × intervalCount` long and period N is
 * `[anchor + N·I, anchor + (N+1)·I)`, always computed from the anchor (create time, or trial end),
 * never from the previous period's end — so month ends clamp without drifting: an anchor on Jan 31
 * gives Feb 28 (29 in a leap year), then Mar 31. Times are UTC; the time of day is kept.
 */

export const INTERVALS = ["day", "week", "month", "year"] as const
export type Interval = (typeof INTERVALS)[number]

export interface Recurrence {
  readonly interval: Interval
  readonly intervalCount: number
}

export interface Period {
  readonly start: Date
  readonly end: Date
}

const DAY_MS = 86_400_000

const daysInMonth = (year: number, month: number) => new Date(Date.UTC(year, month + 1, 0)).getUTCDate()

/** The anchor moved by `months` calendar months, its day clamped to the target month's last day. */
export const addMonths = (anchor: Date, months: number): Date => {
  const total = anchor.getUTCFullYear() * 12 + anchor.getUTCMonth() + months
  const year = Math.floor(total / 12)
  const month = total - year * 12
  const day = Math.min(anchor.getUTCDate(), daysInMonth(year, month))
  const d = new Date(anchor.getTime())
  d.setUTCFullYear(year, month, day)
  return d
}

/** `anchor + n × (interval × intervalCount)`, n ≥ 0 (or negative, for the period before the anchor). */
export const boundary = (anchor: Date, recurrence: Recurrence, n: number): Date => {
  const steps = n * recurrence.intervalCount
  switch (recurrence.interval) {
    case "day":
      return new Date(anchor.getTime() + steps * DAY_MS)
    case "week":
      return new Date(anchor.getTime() + steps * 7 * DAY_MS)
    case "month":
      return addMonths(anchor, steps)
    case "year":
      return addMonths(anchor, steps * 12)
  }
}

/** Period N from the anchor. */
export const periodAt = (anchor: Date, recurrence: Recurrence, n: number): Period => ({
  start: boundary(anchor, recurrence, n),
  end: boundary(anchor, recurrence, n + 1)
})

/** The index of the period that contains `at` (at ≥ anchor). */
export const periodIndexOf = (anchor: Date, recurrence: Recurrence, at: Date): number => {
  const t = at.getTime()
  if (t < anchor.getTime()) return -1
  // An estimate from the average length, then corrected: month lengths vary.
  const approxMs =
    recurrence.interval === "day"
      ? DAY_MS
      : recurrence.interval === "week"
        ? 7 * DAY_MS
        : recurrence.interval === "month"
          ? 30.436875 * DAY_MS
          : 365.2425 * DAY_MS
  let n = Math.max(0, Math.floor((t - anchor.getTime()) / (approxMs * recurrence.intervalCount)) - 1)
  while (boundary(anchor, recurrence, n + 1).getTime() <= t) n++
  while (n > 0 && boundary(anchor, recurrence, n).getTime() > t) n--
  return n
}

/** The trial's end: `trialPeriodDays` days after the start. */
export const trialEndOf = (start: Date, trialPeriodDays: number): Date =>
  new Date(start.getTime() + trialPeriodDays * DAY_MS)

/**
 * Money: integer minor units + an ISO 4217 currency code (uppercase). Never floats.
 */
import { Data, Either, Schema } from "effect"

/** Minor-unit digits where they differ from 2 (ISO 4217). */
const MINOR_DIGITS: Readonly<Record<string, number>> = {
  BIF: 0,
  CLP: 0,
  DJF: 0,
  GNF: 0,
  ISK: 0,
  JPY: 0,
  KMF: 0,
  KRW: 0,
  PYG: 0,
  RWF: 0,
  UGX: 0,
  UYI: 0,
  VND: 0,
  VUV: 0,
  XAF: 0,
  XOF: 0,
  XPF: 0,
  BHD: 3,
  IQD: 3,
  JOD: 3,
  KWD: 3,
  LYD: 3,
  OMR: 3,
  TND: 3
}

export const minorUnitDigits = (currency: string): number => MINOR_DIGITS[currency] ?? 2

export const Currency = Schema.String.pipe(
  Schema.pattern(/^[A-Z]{3}$/, { message: () => "must be an uppercase ISO 4217 currency code" }),
  Schema.brand("Currency")
)
export type Currency = typeof Currency.Type

/** The ISO 4217 codes in use (the runtime's ICU list): what a request's `currency` must be one of. */
export const ISO_4217_CODES: ReadonlyArray<string> = Intl.supportedValuesOf("currency")
const ISO_4217 = new Set(ISO_4217_CODES)
export const isIso4217 = (code: string): boolean => ISO_4217.has(code)

/** A non-negative amount in minor units that fits exactly in a JS number and a PostgreSQL bigint. */
export const Amount = Schema.Int.pipe(
  Schema.greaterThanOrEqualTo(0),
  Schema.lessThanOrEqualTo(Number.MAX_SAFE_INTEGER)
)

export const Money = Schema.Struct({ amount: Amount, currency: Currency })
export type Money = typeof Money.Type

export class CurrencyMismatch extends Data.TaggedError("CurrencyMismatch")<{
  readonly left: string
  readonly right: string
}> {}

export class AmountOutOfRange extends Data.TaggedError("AmountOutOfRange")<{ readonly amount: number }> {}

export const money = (amount: number, currency: Currency): Money => ({ amount, currency })

export const zero = (currency: Currency): Money => ({ amount: 0, currency })

const checked = (amount: number, currency: Currency): Either.Either<Money, AmountOutOfRange> =>
  Number.isSafeInteger(amount) && amount >= 0
    ? Either.right({ amount, currency })
    : Either.left(new AmountOutOfRange({ amount }))

export const add = (a: Money, b: Money): Either.Either<Money, CurrencyMismatch | AmountOutOfRange> =>
  a.currency !== b.currency
    ? Either.left(new CurrencyMismatch({ left: a.currency, right: b.currency }))
    : checked(a.amount + b.amount, a.currency)

export const subtract = (a: Money, b: Money): Either.Either<Money, CurrencyMismatch | AmountOutOfRange> =>
  a.currency !== b.currency
    ? Either.left(new CurrencyMismatch({ left: a.currency, right: b.currency }))
    : checked(a.amount - b.amount, a.currency)

/** Multiplies by a whole quantity (line item × quantity). */
export const times = (a: Money, quantity: number): Either.Either<Money, AmountOutOfRange> =>
  Number.isInteger(quantity)
    ? checked(a.amount * quantity, a.currency)
    : Either.left(new AmountOutOfRange({ amount: Number.NaN }))

export const sum = (
  currency: Currency,
  items: ReadonlyArray<Money>
): Either.Either<Money, CurrencyMismatch | AmountOutOfRange> =>
  items.reduce<Either.Either<Money, CurrencyMismatch | AmountOutOfRange>>(
    (acc, m) => Either.flatMap(acc, (total) => add(total, m)),
    Either.right(zero(currency))
  )

/** Human-readable decimal string, e.g. 1999 USD → "19.99", 500 JPY → "500". */
export const toDecimalString = (m: Money): string => {
  const digits = minorUnitDigits(m.currency)
  if (digits === 0) return String(m.amount)
  const s = String(m.amount).padStart(digits + 1, "0")
  return `${s.slice(0, -digits)}.${s.slice(-digits)}`
}

/** The ISO 4217 codes this runtime knows (ICU's list of currencies in use: no test code XTS, no precious metals). */
const ISO_CURRENCIES: ReadonlySet<string> = new Set(Intl.supportedValuesOf("currency"))

/** Whether `code` is an active ISO 4217 currency code (uppercase). */
export const isIsoCurrency = (code: string): boolean => ISO_CURRENCIES.has(code)

/** The known codes, sorted (for documents and test generators). */
export const isoCurrencies = (): ReadonlyArray<string> => [...ISO_CURRENCIES].sort()

#!/usr/bin/env node
/**
 * Completes package-lock.json with the platform-specific optional packages of other platforms
 * (e.g. @biomejs/cli-darwin-arm64). npm only records optional packages it can resolve; a registry
 * mirror that serves just this machine's platform leaves them out, and `npm ci` then refuses the
 * lockfile ("Missing: … from lock file"). Each added entry carries the os/cpu/libc read from its
 * name, so npm skips it on every platform it does not fit and never fetches it here.
 * Run after `npm install` changes dependencies: `node scripts/lockfile-optional-platforms.mjs`.
 */
import { readFileSync, writeFileSync } from "node:fs"

const file = new URL("../package-lock.json", import.meta.url)
const lock = JSON.parse(readFileSync(file, "utf8"))
const packages = lock.packages

const OS = [
  "darwin",
  "linux",
  "win32",
  "android",
  "freebsd",
  "openbsd",
  "netbsd",
  "sunos",
  "aix",
  "openharmony",
  "cygwin"
]
const CPU = {
  x64: "x64",
  arm64: "arm64",
  ia32: "ia32",
  arm: "arm",
  s390x: "s390x",
  ppc64: "ppc64",
  riscv64: "riscv64",
  loong64: "loong64",
  mips64el: "mips64el",
  x86_64: "x64",
  aarch64: "arm64",
  universal: undefined
}

/** os, cpu and libc from a platform package name such as cli-linux-x64-musl or rollup-win32-arm64-msvc. */
const platformOf = (name) => {
  const parts = name.split("/").pop().split("-")
  const os =
    parts.find((p) => OS.includes(p)) ??
    (parts.includes("windows") || parts.includes("win") ? "win32" : undefined)
  const cpuPart = parts.find((p) => p in CPU)
  const libc = parts.includes("musl")
    ? "musl"
    : parts.includes("gnu") || parts.includes("gnueabihf")
      ? "glibc"
      : undefined
  return { os, cpu: cpuPart ? CPU[cpuPart] : undefined, libc }
}

let added = 0
for (const [path, entry] of Object.entries(packages)) {
  const optional = entry.optionalDependencies
  if (!optional || path === "") continue
  for (const [dep, version] of Object.entries(optional)) {
    // Resolve like node: nested first, then hoisted.
    const nested = `${path}/node_modules/${dep}`
    const hoisted = `node_modules/${dep}`
    if (packages[nested] || packages[hoisted]) continue
    const { os, cpu, libc } = platformOf(dep)
    if (!os && !cpu) continue // not a platform package: leave npm's decision alone
    packages[hoisted] = {
      version: String(version).replace(/^[\^~=]/, ""),
      ...(entry.dev ? { dev: true } : {}),
      optional: true,
      ...(cpu ? { cpu: [cpu] } : {}),
      ...(libc ? { libc: [libc] } : {}),
      ...(os ? { os: [os] } : {})
    }
    added++
  }
}

const sorted = Object.fromEntries(
  Object.entries(packages).sort(([a], [b]) => (a === "" ? -1 : b === "" ? 1 : a < b ? -1 : 1))
)
lock.packages = sorted
writeFileSync(file, `${JSON.stringify(lock, null, 2)}\n`)
console.log(`package-lock.json: added ${added} optional platform packages`)

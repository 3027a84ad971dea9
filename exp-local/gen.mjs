import { transformSync } from "esbuild"
import fs from "node:fs"
const [file, line, col] = process.argv.slice(2)
const out = transformSync(fs.readFileSync(file, "utf8"), { loader: "ts", format: "esm", target: "node20", sourcemap: "inline", sourcefile: file, keepNames: true })
const lines = out.code.split("\n"); const l = lines[+line] ?? ""
console.log(l.slice(Math.max(0, +col - 200), +col + 300))

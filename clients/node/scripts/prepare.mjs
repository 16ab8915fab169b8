// npm's `prepare` step: builds dist/ with tsc. Run by `npm install` in this folder, by
// `npm pack`, and by `npm install ./clients/node` from another project, where npm links this
// folder without its dev dependencies: then they are installed here first (pinned by
// package-lock.json), so the compiler is the locked one.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
if (!existsSync(tsc)) {
  const npm = process.env.npm_execpath;
  const [cmd, args] = npm ? [process.execPath, [npm]] : ["npm", []];
  execFileSync(cmd, [...args, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"], { cwd: root, stdio: "inherit" });
}
execFileSync(process.execPath, [tsc, "-p", "tsconfig.build.json"], { cwd: root, stdio: "inherit" });

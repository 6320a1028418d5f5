// run.mjs runs the http-cache-tests suite (npm package http-cache-tests,
// 0.4.5) against a cache and writes one JSON object to a file: every
// test's result as the suite's runner records it, and each test's id,
// suite, kind and dependencies, for the caller to score with the suite's
// rules. A file, not stdout: a pipe's pending output is cut short by the
// exit. It exits once the results are written, rather than waiting for the
// cache to close idle keep-alive connections as the suite's own CLI does.
//
// Environment: CACHE_TESTS_DIR, the unpacked package; CACHE_TESTS_FETCH,
// node-fetch's entry file; CACHE_TESTS_BASE, the cache's base URL (no
// trailing slash); CACHE_TESTS_OUT, the file to write; CACHE_TESTS_ID, one
// test's id to run alone (optional).
import { writeFileSync } from 'node:fs'

const dir = process.env.CACHE_TESTS_DIR
const { runTests, getResults } = await import(`${dir}/client/runner.mjs`)
const fetch = (await import(process.env.CACHE_TESTS_FETCH)).default
const tests = (await import(`${dir}/tests/index.mjs`)).default
const surrogate = (await import(`${dir}/tests/surrogate-control.mjs`)).default
tests.push(surrogate) // as the suite's CLI does

let toRun = tests
const only = process.env.CACHE_TESTS_ID || ''
if (only !== '') {
  toRun = []
  for (const suite of tests) {
    for (const test of suite.tests) {
      if (test.id === only) {
        test.dump = true
        toRun.push({ name: suite.name, id: suite.id, tests: [test] })
      }
    }
  }
}
const meta = []
for (const suite of tests) {
  for (const test of suite.tests) {
    meta.push({
      id: test.id,
      suite: suite.id,
      name: test.name,
      kind: test.kind || 'required',
      depends_on: test.depends_on || [],
      browser_only: test.browser_only === true
    })
  }
}
await runTests(toRun, fetch, false, process.env.CACHE_TESTS_BASE)
writeFileSync(process.env.CACHE_TESTS_OUT, JSON.stringify({ results: getResults(), tests: meta }))
process.exit(0)

// A first sync of a tenant into WatermelonDB (LokiJS adapter, in memory) through
// clients/watermelondb, against reading the same `changes` pages alone (fetch and
// JSON.parse, nothing stored), in one run, alternating. Run by scripts/bench-watermelondb:
//   node bench/first_sync.mjs <graphql url> <bearer token> <tenant> <records> [runs]
import { Database, Model, appSchema, tableSchema } from "@nozbe/watermelondb";
import LokiModule from "@nozbe/watermelondb/adapters/lokijs/index.js";
import loggerModule from "@nozbe/watermelondb/utils/common/logger/index.js";
import { createSyncAPI, syncColumns } from "../index.js";

const LokiJSAdapter = LokiModule.default ?? LokiModule;
(loggerModule.default ?? loggerModule).silence();
const [url, token, tenant, records, runs = "3"] = process.argv.slice(2);
const LIMIT = 1000;
const FIELDS = { givenName: "given_name", familyName: "family_name", occupation: "occupation", emailAddress: "email_address" };
const schema = appSchema({
  version: 1,
  tables: [
    tableSchema({
      name: "people",
      columns: [...Object.values(FIELDS).map((name) => ({ name, type: "string", isOptional: true })), ...syncColumns()],
    }),
  ],
});
class Person extends Model {
  static table = "people";
}

async function pagesAlone() {
  const query = `query($t: ID!, $cursor: String, $limit: Int, $types: [DeletedItemType!]) {
    changes(tenantID: $t, cursor: $cursor, limit: $limit, types: $types) {
      items { __typename id ... on Person { changeToken ${Object.keys(FIELDS).join(" ")} } ... on DeletedItem { type changeToken } }
      cursor changeToken } }`;
  let cursor = null;
  let items = 0;
  let requests = 0;
  const started = performance.now();
  do {
    const response = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", Authorization: `Bearer ${token}` },
      body: JSON.stringify({ query, variables: { t: tenant, cursor, limit: LIMIT, types: ["PERSON"] } }),
    });
    const body = await response.json();
    requests++;
    items += body.data.changes.items.length;
    cursor = body.data.changes.cursor;
  } while (cursor);
  return { seconds: (performance.now() - started) / 1000, items, requests };
}

let n = 0;
async function intoWatermelon() {
  const adapter = new LokiJSAdapter({ schema, useWebWorker: false, useIncrementalIndexedDB: false, dbName: `bench-${n++}` });
  const database = new Database({ adapter, modelClasses: [Person] });
  const api = createSyncAPI({
    database,
    url,
    tenantID: tenant,
    getToken: async () => token,
    tables: { people: { type: "PERSON", columns: FIELDS } },
    limit: LIMIT,
    pagesPerPull: 10,
  });
  const started = performance.now();
  const stats = await api.sync();
  const seconds = (performance.now() - started) / 1000;
  const items = await database.get("people").query().fetchCount();
  return { seconds, items, requests: stats.requests, rounds: stats.rounds };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const results = { pages: [], watermelon: [] };
await pagesAlone(); // warm-up: the server's first reads
for (let i = 0; i < Number(runs); i++) {
  results.pages.push(await pagesAlone());
  results.watermelon.push(await intoWatermelon());
}
for (const r of [...results.pages, ...results.watermelon]) {
  if (r.items !== Number(records)) throw new Error(`expected ${records} records, got ${r.items}`);
}
const rows = [
  ["changes pages alone (fetch + JSON)", results.pages],
  ["first sync into WatermelonDB (LokiJS)", results.watermelon],
];
const base = median(results.pages.map((r) => r.seconds));
console.log(`${records} people, pages of ${LIMIT}, ${runs} runs each, alternating; median seconds`);
console.log(`${"mode".padEnd(40)}${"requests".padStart(9)}${"seconds".padStart(9)}${"records/s".padStart(11)}${"vs pages".padStart(10)}`);
for (const [label, rs] of rows) {
  const s = median(rs.map((r) => r.seconds));
  console.log(
    `${label.padEnd(40)}${String(rs[0].requests).padStart(9)}${s.toFixed(2).padStart(9)}${Math.round(Number(records) / s).toString().padStart(11)}${(s / base).toFixed(2).padStart(9)}x`,
  );
}
console.log(`all runs (s): pages ${results.pages.map((r) => r.seconds.toFixed(2)).join(" ")}; watermelon ${results.watermelon.map((r) => r.seconds.toFixed(2)).join(" ")}`);
process.exit(0);

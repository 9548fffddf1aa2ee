// A record that leaves a member's view (contract 3.12, a LeftViewItem) leaves Bob's
// WatermelonDB device (unmodified, from npm, LokiJS in memory), syncing with
// createSyncAPI as an app of the family app's release 3 (`visibilitySince: 3`). Ann
// shares a letter with Bob, then unshares it between two pages of his first sync, or
// between two syncs with an edit of his left unsynced. Usage:
//   node test/left_view.mjs <graphql url> <ann's token> <bob's token> <tenant prefix>
// Prints one JSON line: each scenario's findings, for
// tests/ecosystem/test_watermelondb_left_view.py.
import { Database, Model, appSchema, tableSchema } from "@nozbe/watermelondb";
import LokiModule from "@nozbe/watermelondb/adapters/lokijs/index.js";
import { hasUnsyncedChanges } from "@nozbe/watermelondb/sync/index.js";
import loggerModule from "@nozbe/watermelondb/utils/common/logger/index.js";
import { createSyncAPI, syncColumns } from "../index.js";

const LokiJSAdapter = LokiModule.default ?? LokiModule;
(loggerModule.default ?? loggerModule).silence();
const [url, annToken, bobToken, prefix] = process.argv.slice(2);
const RELEASE = 3;
const FIELDS = { givenName: "given_name", familyName: "family_name" };
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
let devices = 0;

async function asAnn(query, variables) {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", Authorization: `Bearer ${annToken}`, "X-Sync-Release": String(RELEASE) },
    body: JSON.stringify({ query, variables }),
  });
  const body = await response.json();
  if (body.errors) throw new Error(JSON.stringify(body.errors));
  return body.data;
}

async function create(tenant, id, givenName, sharedWith = null) {
  const i = { tenantID: tenant, id, person: { givenName }, visibility: sharedWith && { sharedWith } };
  await asAnn(`mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id } } }`, { i });
}

async function unshare(tenant, id) {
  const { person } = await asAnn(`query($t: ID!, $id: ID!) { person(tenantID: $t, id: $id) { changeToken } }`, {
    t: tenant,
    id,
  });
  const i = { tenantID: tenant, id, changeToken: person.changeToken, visibility: { owner: "ann", sharedWith: [] } };
  await asAnn(`mutation($i: SetVisibilityInput!) { setVisibility(input: $i) { item { id } } }`, { i });
}

async function annsLetter(tenant) {
  const { person } = await asAnn(`query($t: ID!) { person(tenantID: $t, id: "letter") { givenName familyName } }`, {
    t: tenant,
  });
  return person;
}

class Bob {
  constructor(tenant) {
    this.name = `bob${++devices}`;
    this.rejected = [];
    this.pages = []; // each page's items, as __typename:id
    this.beforePage = null; // run once, before the first `changes` request sending a cursor
    const adapter = new LokiJSAdapter({ schema, useWebWorker: false, useIncrementalIndexedDB: false, dbName: this.name });
    this.database = new Database({ adapter, modelClasses: [Person] });
    this.people = this.database.get("people");
    this.api = createSyncAPI({
      database: this.database,
      url,
      tenantID: tenant,
      getToken: async () => bobToken,
      tables: { people: { type: "PERSON", columns: FIELDS } },
      release: RELEASE,
      visibilitySince: RELEASE,
      limit: 2,
      onRejected: (r) => this.rejected.push([r.id, r.kind, r.code]),
      fetch: async (target, init) => {
        const body = JSON.parse(init.body);
        const page = body.query.includes("changes(");
        if (page && body.variables.cursor && this.beforePage) {
          const run = this.beforePage;
          this.beforePage = null;
          await run();
        }
        const response = await fetch(target, init);
        if (page) {
          const answer = await response.clone().json();
          this.pages.push((answer.data?.changes?.items ?? []).map((i) => `${i.__typename}:${i.id}`));
        }
        return response;
      },
    });
  }
  async docs() {
    const all = await this.people.query().fetch();
    return Object.fromEntries(all.map((r) => [r.id, r._raw.given_name ?? null]));
  }
}

async function betweenPages() {
  const tenant = `${prefix}-pages`;
  await create(tenant, "letter", "Letter", ["bob"]);
  for (const name of ["cy", "di", "ed"]) await create(tenant, name, name);
  const bob = new Bob(tenant);
  let unsharedAfter = null;
  bob.beforePage = async () => {
    unsharedAfter = bob.pages.length;
    await unshare(tenant, "letter");
  };
  await bob.api.sync();
  const afterFirst = await bob.docs();
  await bob.api.sync();
  return { unsharedAfter, pages: bob.pages, afterFirst, docs: await bob.docs(), ann: await annsLetter(tenant) };
}

async function queuedEdit() {
  const tenant = `${prefix}-queued`;
  await create(tenant, "letter", "Letter", ["bob"]);
  await create(tenant, "memo", "Memo", ["bob"]);
  for (const name of ["cy", "di", "ed"]) await create(tenant, name, name);
  const bob = new Bob(tenant);
  await bob.api.sync();
  const before = await bob.docs();
  const letter = await bob.people.find("letter");
  await bob.database.write(() => letter.update((r) => r._setRaw("family_name", "Bob's"))); // not synced yet
  await unshare(tenant, "letter");
  await unshare(tenant, "memo");
  const requests = bob.pages.length;
  await bob.api.sync();
  return {
    before,
    pulled: bob.pages.slice(requests),
    docs: await bob.docs(),
    rejected: bob.rejected,
    unsynced: await hasUnsyncedChanges({ database: bob.database }),
    ann: await annsLetter(tenant),
  };
}

const findings = {};
for (const [name, scenario] of Object.entries({ betweenPages, queuedEdit })) {
  try {
    findings[name] = await scenario();
  } catch (e) {
    findings[name] = { failed: String(e?.stack ?? e) };
  }
}
console.log(JSON.stringify(findings));
process.exit(0);

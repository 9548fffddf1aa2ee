// A cursor the server refuses (INVALID_CURSOR): a WatermelonDB device (unmodified,
// from npm, LokiJS in memory) syncing with createSyncAPI through one address in front
// of two servers whose CURSOR_SECRETs differ (tests/support/switch_proxy.py), which
// moves to the other server right after handing out a cursor: the next page reaches a
// server that did not sign it (a rotated secret, or a server of an earlier release
// during a rollback or a rolling deploy). One page per synchronize() call
// (`pagesPerPull: 1`), so the refused cursor is the one kept in local storage. Usage:
//   node test/cursor_refused.mjs <proxy url> <server url> <token> <tenant prefix>
// Another device (Ann) writes straight to the server. Prints one JSON line: each
// scenario's findings, for tests/ecosystem/test_watermelondb_cursor_refused.py.
import { Database, Model, appSchema, tableSchema } from "@nozbe/watermelondb";
import LokiModule from "@nozbe/watermelondb/adapters/lokijs/index.js";
import { addColumns, schemaMigrations } from "@nozbe/watermelondb/Schema/migrations/index.js";
import { hasUnsyncedChanges } from "@nozbe/watermelondb/sync/index.js";
import loggerModule from "@nozbe/watermelondb/utils/common/logger/index.js";
import { createSyncAPI, syncColumns } from "../index.js";

const LokiJSAdapter = LokiModule.default ?? LokiModule;
(loggerModule.default ?? loggerModule).silence();
const [proxy, server, token, prefix] = process.argv.slice(2);
const PEOPLE = 250;
const OLD = 300;
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

async function asAnn(query, variables) {
  const response = await fetch(server, {
    method: "POST",
    headers: { "content-type": "application/json", Authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables }),
  });
  const body = await response.json();
  if (body.errors) throw new Error(JSON.stringify(body.errors));
  return body.data;
}

async function control(path, order) {
  await fetch(`${proxy}${path}`, { method: "POST", body: JSON.stringify(order) });
}

async function people(tenant, count, fields = {}, letter = "p") {
  const names = Array.from({ length: count }, (_, n) => `${letter}${String(n).padStart(3, "0")}`);
  for (let i = 0; i < names.length; i += 100) {
    const mutations = names
      .slice(i, i + 100)
      .map((id) => ({ createPerson: { tenantID: tenant, id, clientMutationID: `${tenant}-${id}`, person: { givenName: id, ...fields } } }));
    await asAnn(`mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status } } }`, { i: { tenantID: tenant, mutations } });
  }
  return names;
}

async function remove(tenant, id) {
  const { person } = await asAnn(`query($t: ID!, $id: ID!) { person(tenantID: $t, id: $id) { changeToken } }`, { t: tenant, id });
  const i = { tenantID: tenant, id, changeToken: person.changeToken };
  await asAnn(`mutation($i: DeletePersonInput!) { deletePerson(input: $i) { deletedItem { id } } }`, { i });
}

// The tenant's live people as the server holds them (a first sync, straight to it).
async function serverState(tenant) {
  const state = {};
  for (let cursor = null; ; ) {
    const { changes } = await asAnn(
      `query($t: ID!, $cursor: String) { changes(tenantID: $t, since: null, cursor: $cursor, limit: 1000) {
        items { __typename id ... on Person { givenName familyName } } cursor } }`,
      { t: tenant, cursor },
    );
    for (const item of changes.items) {
      if (item.__typename === "Person") state[item.id] = [item.givenName ?? null, item.familyName ?? null];
    }
    cursor = changes.cursor;
    if (!cursor) return state;
  }
}

let devices = 0;
class Device {
  constructor(tenant) {
    this.name = `device${++devices}`;
    this.beforeCursorPage = null; // run once, before the first `changes` request sending a cursor
    this.resyncs = 0;
    const adapter = new LokiJSAdapter({ schema, useWebWorker: false, useIncrementalIndexedDB: false, dbName: this.name });
    this.database = new Database({ adapter, modelClasses: [Person] });
    this.people = this.database.get("people");
    this.api = createSyncAPI({
      database: this.database,
      url: `${proxy}/graphql`,
      tenantID: tenant,
      getToken: async () => token,
      tables: { people: { type: "PERSON", columns: FIELDS } },
      limit: 100,
      pagesPerPull: 1,
      onResync: () => this.resyncs++,
      fetch: async (target, init) => {
        const body = JSON.parse(init.body);
        if (body.query.includes("changes(") && body.variables.cursor && this.beforeCursorPage) {
          const run = this.beforeCursorPage;
          this.beforeCursorPage = null;
          await run();
        }
        return fetch(target, init);
      },
    });
  }
  async docs() {
    const all = await this.people.query().fetch();
    return Object.fromEntries(all.map((r) => [r.id, [r._raw.given_name || null, r._raw.family_name || null]]));
  }
  async sync() {
    try {
      const stats = await this.api.sync();
      return { stats };
    } catch (error) {
      return { error: error.code ?? String(error) };
    }
  }
}

// A device up to date with 300 people, with an edit and a create made offline, syncs
// 250 new people:
// page 1 from one server (applied by the first synchronize() call), page 2 refused by
// the other; p000 (on page 1) deleted between them.
async function incremental(tenant, times = 1) {
  await people(tenant, OLD, {}, "o"); // what a resync would download again
  await asAnn(`mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id } } }`, {
    i: { tenantID: tenant, id: "first", person: { givenName: "first" } },
  });
  const device = new Device(tenant);
  const before = await device.sync();
  await people(tenant, PEOPLE);
  await device.database.write(async () => {
    const first = await device.people.find("first");
    await first.update((r) => r._setRaw("family_name", "edited offline"));
    await device.people.create((r) => {
      r._raw.id = "offline";
      r._setRaw("given_name", "made offline");
    });
  });
  await control("/_switch", { times });
  device.beforeCursorPage = () => remove(tenant, "p000");
  const synced = await device.sync();
  await control("/_use", { server: 0 });
  const again = times > 1 ? await device.sync() : null;
  return {
    before: before.stats ? true : before.error,
    itemsBefore: before.stats?.items ?? null, // stats count from the client's start
    synced,
    again,
    docs: await device.docs(),
    server: await serverState(tenant),
    unsynced: await hasUnsyncedChanges({ database: device.database }),
    resyncs: device.resyncs,
  };
}

// A new device's first sync, its page 2 refused; p000 and p001 (on page 1, applied by
// the first synchronize() call) deleted between them: a first sync sends the
// deletions of the tenant's latest write only, so p000's comes in no page of a first
// sync again.
async function firstSync(tenant) {
  await people(tenant, PEOPLE);
  const device = new Device(tenant);
  await control("/_switch", { times: 1 });
  device.beforeCursorPage = async () => {
    await remove(tenant, "p000");
    await remove(tenant, "p001");
  };
  const synced = await device.sync();
  await control("/_use", { server: 0 });
  return { synced, docs: await device.docs(), server: await serverState(tenant), resyncs: device.resyncs };
}

// An app whose schema version 2 adds the people's occupation column (a field of the
// catalog's release 1): its migration sync catches up on the occupations its earlier
// pulls left out, page by page (`catchUp`), the second page refused.
const widerSchema = appSchema({
  version: 2,
  tables: [tableSchema({ name: "people", columns: [...schema.tables.people.columnArray, { name: "occupation", type: "string", isOptional: true }] })],
});
const widerMigrations = schemaMigrations({
  migrations: [{ toVersion: 2, steps: [addColumns({ table: "people", columns: [{ name: "occupation", type: "string", isOptional: true }] })] }],
});
function app(tenant, database, columns) {
  return createSyncAPI({
    database,
    url: `${proxy}/graphql`,
    tenantID: tenant,
    getToken: async () => token,
    tables: { people: { type: "PERSON", columns } },
    migrationsEnabledAtVersion: 1,
    limit: 100,
  });
}
async function catchUp(tenant) {
  await people(tenant, PEOPLE, { occupation: "pilot" });
  const options = { schema, migrations: schemaMigrations({ migrations: [] }) };
  const adapter = new LokiJSAdapter({ ...options, useWebWorker: false, useIncrementalIndexedDB: false, dbName: `catchup-${tenant}` });
  const old = new Database({ adapter, modelClasses: [Person] });
  await app(tenant, old, FIELDS).sync();
  const wider = await adapter.testClone({ schema: widerSchema, migrations: widerMigrations });
  const database = new Database({ adapter: wider, modelClasses: [Person] });
  await control("/_switch", { times: 1, on: ["catchUp"] });
  let synced;
  try {
    synced = { stats: await app(tenant, database, { ...FIELDS, occupation: "occupation" }).sync() };
  } catch (error) {
    synced = { error: error.code ?? String(error) };
  }
  await control("/_use", { server: 0 });
  const rows = await database.get("people").query().fetch();
  return { synced, people: rows.length, occupations: rows.filter((r) => r._raw.occupation === "pilot").length };
}

const findings = {};
const scenarios = {
  incremental: () => incremental(`${prefix}-incremental`),
  twice: () => incremental(`${prefix}-twice`, 2),
  firstSync: () => firstSync(`${prefix}-first`),
  catchUp: () => catchUp(`${prefix}-catchup`),
};
for (const [name, scenario] of Object.entries(scenarios)) {
  try {
    findings[name] = await scenario();
  } catch (e) {
    findings[name] = { failed: String(e?.stack ?? e) };
  }
}
console.log(JSON.stringify(findings));
process.exit(0);

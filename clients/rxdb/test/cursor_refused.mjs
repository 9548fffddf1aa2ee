// A cursor the server refuses (INVALID_CURSOR): an RxDB device (memory storage, no
// internals touched) replicating with replicateSyncAPI through one address in front
// of two servers whose CURSOR_SECRETs differ (tests/support/switch_proxy.py), which
// moves to the other server right after handing out a cursor: the next page of the
// pull reaches a server that did not sign it (a rotated secret, or a server of an
// earlier release during a rollback or a rolling deploy). Usage:
//   node test/cursor_refused.mjs <proxy url> <server url> <token> <tenant prefix>
// Another device (Ann) writes straight to the server. Prints one JSON line: each
// scenario's findings, for tests/ecosystem/test_rxdb_cursor_refused.py.
import { addRxPlugin, createRxDatabase } from "rxdb";
import { RxDBMigrationSchemaPlugin } from "rxdb/plugins/migration-schema";
import { getRxStorageMemory } from "rxdb/plugins/storage-memory";
import { replicateSyncAPI } from "../index.js";

addRxPlugin(RxDBMigrationSchemaPlugin);

const [proxy, server, token, prefix] = process.argv.slice(2);
const PEOPLE = 250;
const OLD = 300;
// Long enough for a sync of 250 people on a loaded machine; a pull that fails on
// every retry never gets there (the finding is then `stuck`).
const SYNC_WAIT_MS = 30_000;
const schema = {
  version: 0,
  primaryKey: "id",
  type: "object",
  properties: { id: { type: "string", maxLength: 64 }, givenName: { type: "string" }, familyName: { type: "string" } },
  required: ["id"],
};

async function asAnn(query, variables) {
  const response = await realFetch(server, {
    method: "POST",
    headers: { "content-type": "application/json", Authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables }),
  });
  const body = await response.json();
  if (body.errors) throw new Error(JSON.stringify(body.errors));
  return body.data;
}

async function control(path, order) {
  await realFetch(`${proxy}${path}`, { method: "POST", body: JSON.stringify(order) });
}

// Between two pages: `beforeCursorPage` runs once, before the first `changes`
// request that sends a cursor (the one the other server refuses).
const realFetch = globalThis.fetch;
let beforeCursorPage = null;
globalThis.fetch = async (input, init) => {
  if (input instanceof Request && beforeCursorPage) {
    const body = await input.clone().text();
    if (body.includes("changes(") && JSON.parse(body).variables?.cursor) {
      const run = beforeCursorPage;
      beforeCursorPage = null;
      await run();
    }
  }
  return realFetch(input, init);
};

async function people(tenant, count, fields = {}, letter = "p") {
  const names = Array.from({ length: count }, (_, n) => `${letter}${String(n).padStart(3, "0")}`);
  for (let i = 0; i < names.length; i += 100) {
    const mutations = names
      .slice(i, i + 100)
      .map((id) => ({ createPerson: { tenantID: tenant, id, clientMutationID: `${tenant}-${id}`, person: { givenName: id, ...fields } } }));
    await asAnn(
      `mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status } } }`,
      { i: { tenantID: tenant, mutations } },
    );
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
  // `name`: a device opened again (its storage and checkpoint kept), with `collection`.
  constructor(tenant, name = null, collection = { schema }) {
    this.tenant = tenant;
    this.name = name ?? `device${++devices}`;
    this.collection = collection;
    this.errors = [];
    this.resyncs = 0;
  }
  async open() {
    this.db = await createRxDatabase({ name: this.name, storage: getRxStorageMemory(), multiInstance: false });
    await this.db.addCollections({ people: this.collection });
    this.people = this.db.people;
    return this;
  }
  // One sync: true once in sync, false when not within SYNC_WAIT_MS (then stopped).
  async sync() {
    this.state = replicateSyncAPI({
      collection: this.people,
      url: `${proxy}/graphql`,
      tenantID: this.tenant,
      type: "PERSON",
      headers: { Authorization: `Bearer ${token}` },
      wsUrl: false,
      batchSize: 100,
      waitForLeadership: false,
      retryTime: 200,
      replicationIdentifier: `${this.name}-${this.tenant}`,
      onResync: () => this.resyncs++,
    });
    this.state.error$.subscribe((e) => this.errors.push(e.parameters?.errors?.[0]?.extensions?.code ?? e.code ?? String(e)));
    const done = (async () => {
      await this.state.awaitInitialReplication();
      this.state.reSync();
      await this.state.awaitInSync();
      return true;
    })();
    const synced = await Promise.race([done, new Promise((resolve) => setTimeout(() => resolve(false), SYNC_WAIT_MS))]);
    await this.state.cancel();
    return synced;
  }
  async docs() {
    const all = await this.people.find().exec();
    return Object.fromEntries(all.map((d) => [d.id, [d.givenName ?? null, d.familyName ?? null]]));
  }
}

// A device up to date with 300 people, with an edit and a create made offline, syncs
// 250 new people:
// page 1 from one server, page 2 refused by the other; p000 deleted between them.
async function incremental(tenant, times = 1) {
  await people(tenant, OLD, {}, "o"); // what a resync would download again
  await asAnn(`mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id } } }`, {
    i: { tenantID: tenant, id: "first", person: { givenName: "first" } },
  });
  const device = await new Device(tenant).open();
  const before = await device.sync();
  await people(tenant, PEOPLE);
  await (await device.people.findOne("first").exec()).incrementalPatch({ familyName: "edited offline" });
  await device.people.insert({ id: "offline", givenName: "made offline" });
  await control("/_switch", { times });
  beforeCursorPage = () => remove(tenant, "p000");
  const synced = await device.sync();
  await control("/_use", { server: 0 });
  return { before, synced, docs: await device.docs(), server: await serverState(tenant), errors: device.errors, resyncs: device.resyncs };
}

// A new device's first sync, page 2 refused; p000 and p001 (on page 1) deleted
// between the pages: a first sync sends the deletions of the tenant's latest write
// only, so p000's comes in no page of a first sync again.
async function firstSync(tenant) {
  await people(tenant, PEOPLE);
  const device = await new Device(tenant).open();
  await control("/_switch", { times: 1 });
  beforeCursorPage = async () => {
    await remove(tenant, "p000");
    await remove(tenant, "p001");
  };
  const synced = await device.sync();
  await control("/_use", { server: 0 });
  return { synced, docs: await device.docs(), server: await serverState(tenant), errors: device.errors, resyncs: device.resyncs };
}

// The collection's schema version 1 adds `phoneNumber` (a field of the catalog's
// release 1): the first pull after the migration catches up on the values written
// before, page by page (`catchUp`), its second page refused.
async function catchUp(tenant) {
  await people(tenant, PEOPLE, { phoneNumber: "+1 555 0100" });
  const name = `catchup${++devices}`;
  const without = { ...schema, properties: { ...schema.properties } };
  const old = await new Device(tenant, name, { schema: without }).open();
  const before = await old.sync();
  await old.db.close();
  const withPhone = { ...schema, version: 1, properties: { ...schema.properties, phoneNumber: { type: "string" } } };
  const device = await new Device(tenant, name, { schema: withPhone, migrationStrategies: { 1: (doc) => doc } }).open();
  await control("/_switch", { times: 1, on: ["catchUp"] });
  const synced = await device.sync();
  await control("/_use", { server: 0 });
  const all = await device.people.find().exec();
  return {
    before,
    synced,
    people: all.length,
    phones: all.filter((d) => d.get("phoneNumber")).length,
    caughtUp: device.state.caughtUp(),
    errors: device.errors,
    resyncs: device.resyncs,
  };
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

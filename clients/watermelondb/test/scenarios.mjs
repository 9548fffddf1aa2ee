// WatermelonDB (unmodified, from npm, LokiJS adapter in memory: useWebWorker false,
// useIncrementalIndexedDB false) syncing through the API with clients/watermelondb.
// Usage:
//   node test/scenarios.mjs <graphql url> <bearer token> <tenant prefix> [scenario,...]
// Prints one JSON line: each scenario's findings, for tests/ecosystem/test_watermelondb.py.
// "Equal" always means: every device holds exactly what a first sync of the tenant,
// read to its last page, returns (serverPeople), and has nothing left to push.
import { Database, Model, appSchema, tableSchema } from "@nozbe/watermelondb";
import LokiModule from "@nozbe/watermelondb/adapters/lokijs/index.js";
import { addColumns, createTable, schemaMigrations } from "@nozbe/watermelondb/Schema/migrations/index.js";
import { hasUnsyncedChanges } from "@nozbe/watermelondb/sync/index.js";
import loggerModule from "@nozbe/watermelondb/utils/common/logger/index.js";
import { WebSocket } from "ws";
import { attachmentURL, createSyncAPI, hashAttachment, syncColumns, uploadAttachment } from "../index.js";
// The tests' app (tests/apps/release2/) as scripts/generate-clients writes its
// WatermelonDB schema for each release (clients/N/watermelondb/schema.js: the column
// map, the appSchema and its migrations; copied beside the module by
// tests/ecosystem/test_watermelondb.py), never by hand. Its tables are named after the
// types (person, reminder; release 2: note, member).
import * as release1 from "../generated/release2/1/watermelondb/schema.js";
import * as release2 from "../generated/release2/2/watermelondb/schema.js";

const LokiJSAdapter = LokiModule.default ?? LokiModule;
(loggerModule.default ?? loggerModule).silence();

const [url, token, prefix] = process.argv.slice(2);
const readerToken = process.env.WM_READER_TOKEN; // a reader of `${prefix}-reader` (contract 6, roles)
const auth = { Authorization: `Bearer ${token}` };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const TABLES = release1.tables;
const FIELDS = TABLES.person.columns;
const schema = release1.schema;
class Person extends Model {
  static table = "person";
}
class Reminder extends Model {
  static table = "reminder";
}

async function gql(query, variables, at = url) {
  const response = await fetch(at, {
    method: "POST",
    headers: { "content-type": "application/json", ...auth },
    body: JSON.stringify({ query, variables }),
  });
  const body = await response.json();
  if (body.errors) throw new Error(JSON.stringify(body.errors));
  return body.data;
}

// A first sync read to the end, by hand (no module): the server's people.
async function serverPeople(tenant, type = "Person") {
  const people = {};
  let cursor = null;
  for (;;) {
    const data = await gql(
      `query($t: ID!, $c: String) { changes(tenantID: $t, cursor: $c, limit: 1000) {
        items { __typename id ... on Person { givenName familyName occupation photo { sha256 size contentType } }
                ... on Reminder { title personID } } cursor } }`,
      { t: tenant, c: cursor },
    );
    for (const item of data.changes.items) {
      if (item.__typename === type) {
        const { __typename, id, ...rest } = item;
        people[id] = Object.fromEntries(Object.entries(rest).filter(([, v]) => v !== null));
      } else if (item.__typename === "DeletedItem") delete people[item.id];
    }
    if (!data.changes.cursor) return people;
    cursor = data.changes.cursor;
  }
}

async function serverCreate(tenant, people) {
  for (let i = 0; i < people.length; i += 100) {
    const mutations = people.slice(i, i + 100).map(({ id, ...person }) => ({ createPerson: { tenantID: tenant, id, person } }));
    const data = await gql(
      `mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status } } }`,
      { i: { tenantID: tenant, mutations } },
    );
    if (data.pushChanges.results.some((r) => r.status !== "APPLIED")) throw new Error("server create failed");
  }
}

// An update (`changes`) or, with `changes` null, a deletion, written on the server as
// another device would, guarded by the current token.
async function serverEdit(tenant, id, changes) {
  const data = await gql(`query($t: ID!, $id: ID!) { person(tenantID: $t, id: $id) { changeToken } }`, { t: tenant, id });
  const target = { tenantID: tenant, id, changeToken: data.person.changeToken };
  const mutation = changes ? { updatePerson: { ...target, changes } } : { deletePerson: target };
  const result = await gql(`mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status } } }`, {
    i: { tenantID: tenant, mutations: [mutation] },
  });
  if (result.pushChanges.results[0].status !== "APPLIED") throw new Error(`server edit of ${id} failed`);
}

async function deleteTenant(tenant) {
  for (;;) {
    const data = await gql(`mutation($t: ID!) { deleteTenant(tenantID: $t, confirm: $t) { done } }`, { t: tenant });
    if (data.deleteTenant.done) return;
  }
}

let deviceCount = 0;
class Device {
  constructor(tenant, options = {}) {
    this.tenant = tenant;
    this.name = `w${++deviceCount}`;
    this.errors = [];
    this.rejected = [];
    this.tenantDeleted = 0;
    this.resyncs = 0;
    this.offline = false;
    const adapter = new LokiJSAdapter({
      schema,
      useWebWorker: false,
      useIncrementalIndexedDB: false,
      dbName: `${this.name}-${tenant}`,
    });
    this.database = new Database({ adapter, modelClasses: [Person, Reminder] });
    this.people = this.database.get("person");
    this.requests = [];
    this.api = createSyncAPI({
      database: this.database,
      url,
      tenantID: tenant,
      getToken: options.getToken ?? (async () => token),
      tables: options.tables ?? TABLES,
      limit: options.limit ?? 100,
      pagesPerPull: options.pagesPerPull ?? 10,
      onRejected: (r) => this.rejected.push(r),
      onResync: () => this.resyncs++,
      onTenantDeleted: () => this.tenantDeleted++,
      onNotAMember: options.onNotAMember,
      // The device's network: cut when offline; every request recorded.
      fetch: async (target, init) => {
        if (this.offline) throw new TypeError("fetch failed: offline");
        const body = JSON.parse(init.body);
        this.requests.push(body);
        if (options.beforeRequest) await options.beforeRequest(body, this.requests.length);
        return fetch(target, init);
      },
    });
  }
  async sync() {
    return this.api.sync();
  }
  async trySync() {
    try {
      await this.api.sync();
      return null;
    } catch (error) {
      this.errors.push(error.code ?? String(error));
      return error;
    }
  }
  async create(id, fields) {
    await this.database.write(() =>
      this.people.create((r) => {
        r._raw.id = id;
        for (const [f, v] of Object.entries(fields)) r._setRaw(FIELDS[f], v);
      }),
    );
  }
  async edit(id, fields) {
    const record = await this.people.find(id);
    await this.database.write(() =>
      record.update((r) => {
        for (const [f, v] of Object.entries(fields)) r._setRaw(FIELDS[f], v);
      }),
    );
  }
  async remove(id) {
    const record = await this.people.find(id);
    await this.database.write(() => record.markAsDeleted());
  }
  async docs() {
    const all = await this.people.query().fetch();
    const out = {};
    for (const r of all) {
      const doc = {};
      for (const [f, c] of Object.entries(FIELDS)) {
        const v = r._raw[c];
        if (v !== null && v !== undefined && v !== "") doc[f] = f === "photo" ? JSON.parse(v) : v;
      }
      out[r.id] = doc;
    }
    return out;
  }
  async clean() {
    return !(await hasUnsyncedChanges({ database: this.database }));
  }
}

function same(a, b) {
  return JSON.stringify(sortKeys(a)) === JSON.stringify(sortKeys(b));
}
function sortKeys(o) {
  if (o === null || typeof o !== "object") return o;
  return Object.fromEntries(Object.keys(o).sort().map((k) => [k, sortKeys(o[k])]));
}

async function converged(tenant, ...devices) {
  const server = await serverPeople(tenant);
  const views = [];
  const clean = [];
  for (const d of devices) {
    views.push(await d.docs());
    clean.push(await d.clean());
  }
  // And a new device's first sync through the module.
  const fresh = new Device(tenant);
  await fresh.sync();
  const first = await fresh.docs();
  return {
    equal: views.every((v) => same(v, server)) && same(first, server) && clean.every(Boolean),
    clean,
    server,
    devices: views,
    errors: devices.flatMap((d) => d.errors),
  };
}

async function twoDevices(tenant, people) {
  const a = new Device(tenant);
  const b = new Device(tenant);
  for (const [id, fields] of Object.entries(people)) await a.create(id, fields);
  await a.sync();
  await b.sync();
  return [a, b];
}

// --- scenarios -------------------------------------------------------------------

async function bulkPull() {
  // 250 people and 20 reminders on the server; a device pulls pages of 50, 2 pages
  // per synchronize(): every record, in both tables, with its change token.
  const tenant = `${prefix}-bulk`;
  await serverCreate(tenant, Array.from({ length: 250 }, (_, i) => ({ id: `p${i}`, givenName: `g${i}` })));
  const reminders = Array.from({ length: 20 }, (_, i) => ({
    createReminder: { tenantID: tenant, id: `r${i}`, reminder: { title: `t${i}`, personID: `p${i}` } },
  }));
  await gql(`mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status } } }`, {
    i: { tenantID: tenant, mutations: reminders },
  });
  const a = new Device(tenant, { limit: 50, pagesPerPull: 2 });
  const stats = await a.sync();
  const reminderRows = await a.database.get("reminder").query().fetch();
  const tokens = (await a.people.query().fetch()).filter((r) => /^[0-9A-Z]{26}$/.test(r._raw.change_token)).length;
  const result = await converged(tenant, a);
  return {
    ...result,
    count: Object.keys(result.devices[0]).length,
    reminders: reminderRows.length,
    remindersEqual: same(
      Object.fromEntries(reminderRows.map((r) => [r.id, { title: r._raw.title, personID: r._raw.person_id }])),
      await serverPeople(tenant, "Reminder"),
    ),
    tokens,
    pages: stats.pages,
    rounds: stats.rounds,
    server: undefined,
    devices: undefined,
  };
}

async function offlineEdits() {
  // Two devices offline: edits of the same record (different columns, and the same
  // column), of different records, and creates. B syncs; between B's pull and its
  // push, A pushes its edits: B's push meets CONFLICTs (x, w), its synchronize()
  // fails, the next one pulls, WatermelonDB merges per column, and B pushes again.
  const tenant = `${prefix}-offline`;
  let a = null;
  let raced = false;
  const b = new Device(tenant, {
    beforeRequest: async (body) => {
      if (!raced && body.query.includes("pushChanges")) {
        raced = true;
        await a.sync();
      }
    },
  });
  a = new Device(tenant);
  for (const [id, fields] of Object.entries({
    x: { givenName: "Ann", familyName: "Lee" },
    y: { givenName: "Bo" },
    z: { givenName: "Cy" },
    w: { givenName: "Di", occupation: "nurse" },
  })) await a.create(id, fields);
  await a.sync();
  raced = true;
  await b.sync();
  raced = false;
  a.offline = b.offline = true;
  await a.edit("x", { givenName: "Anna" });
  await b.edit("x", { familyName: "Lovelace" });
  await a.edit("y", { occupation: "pilot" });
  await b.edit("z", { familyName: "Young" });
  await a.edit("w", { occupation: "doctor" });
  await b.edit("w", { occupation: "surgeon" });
  await a.create("na", { givenName: "new on a" });
  await b.create("nb", { givenName: "new on b" });
  const offlineFailed = (await a.trySync())?.message ?? null;
  a.offline = b.offline = false;
  a.errors = [];
  const bStats = await b.sync(); // A pushes between B's pull and B's push
  await a.sync();
  return { ...(await converged(tenant, a, b)), offlineFailed, conflictsB: bStats.conflicts, roundsB: bStats.rounds };
}

async function deleteVersusEdit() {
  // Both orders: the deletion syncs first (v: the edit then meets a CONFLICT carrying
  // the DeletedItem), or the edit does (u: the deletion meets a CONFLICT with the
  // edited version and is sent again). The deletion wins; k's edit is kept.
  const tenant = `${prefix}-delete`;
  const [a, b] = await twoDevices(tenant, { v: { givenName: "Vi" }, u: { givenName: "Ute" }, k: { givenName: "Kept" } });
  a.offline = b.offline = true;
  await a.remove("v");
  await b.edit("v", { givenName: "Vida" });
  await b.edit("k", { occupation: "still here" });
  a.offline = b.offline = false;
  await a.sync();
  const bStats = await b.sync();
  a.offline = b.offline = true;
  await a.remove("u");
  await b.edit("u", { familyName: "Ulm" });
  a.offline = b.offline = false;
  await b.sync();
  const aStats = await a.sync();
  await b.sync();
  return { ...(await converged(tenant, a, b)), conflictsA: aStats.conflicts, conflictsB: bStats.conflicts };
}

async function manyOfflineEdits() {
  // 300 edits on a device offline (100 creates, 150 updates of 50 records, 50
  // deletions) while another device edits some of the same records online: pushes of
  // 100, conflicts across batches, every device equal at the end.
  const tenant = `${prefix}-many`;
  const start = {};
  for (let i = 0; i < 100; i++) start[`s${i}`] = { givenName: `s${i}` };
  const [a, b] = await twoDevices(tenant, start);
  b.offline = true;
  let edits = 0;
  for (let i = 0; i < 100; i++, edits++) await b.create(`c${i}`, { givenName: `created ${i}` });
  for (let round = 0; round < 3; round++) {
    for (let i = 0; i < 50; i++, edits++) await b.edit(`s${i}`, { occupation: `job ${round}`, familyName: `f${round}-${i}` });
  }
  for (let i = 50; i < 100; i++, edits++) await b.remove(`s${i}`);
  for (let i = 40; i < 60; i++) await a.edit(`s${i}`, { givenName: `a-${i}` }); // online, meanwhile
  await a.sync();
  b.offline = false;
  const started = Date.now();
  const stats = await b.sync();
  const ms = Date.now() - started;
  await a.sync();
  const result = await converged(tenant, a, b);
  return {
    ...result,
    edits,
    ms,
    pushed: stats.pushed,
    conflicts: stats.conflicts,
    serverCount: Object.keys(result.server).length,
    server: undefined,
    devices: undefined,
  };
}

async function interruptedPull() {
  // 300 people; pages of 50, 2 per synchronize(). The network fails on the 4th page:
  // the first two pages stay applied, and the sync resumes from their position (a
  // cursor), not from the start. Writes committed before the resuming sync() call
  // (an edit, two deletions, five creates: after the interrupted read's bound) are
  // in the device when that call returns.
  const tenant = `${prefix}-interrupted`;
  await serverCreate(tenant, Array.from({ length: 300 }, (_, i) => ({ id: `i${String(i).padStart(3, "0")}`, givenName: `g${i}` })));
  let cut = true;
  const a = new Device(tenant, {
    limit: 50,
    pagesPerPull: 2,
    beforeRequest: async (body, n) => {
      if (cut && n === 4) throw new TypeError("fetch failed: the network went away");
    },
  });
  const failed = await a.trySync();
  const afterFailure = Object.keys(await a.docs()).length;
  cut = false;
  await serverCreate(tenant, Array.from({ length: 5 }, (_, i) => ({ id: `late${i}`, givenName: "late" })));
  await serverEdit(tenant, "i000", { occupation: "edited meanwhile" });
  await serverEdit(tenant, "i001", null);
  await serverEdit(tenant, "i299", null);
  const before = a.requests.length;
  await a.sync();
  const resumedWith = a.requests[before].variables;
  const pagesAfterResume = a.requests.length - before;
  const caughtUp = same(await a.docs(), await serverPeople(tenant)) && (await a.clean());
  const result = await converged(tenant, a);
  return {
    ...result,
    interrupted: failed?.message ?? null,
    afterFailure,
    resumedWithCursor: Boolean(resumedWith.cursor) && resumedWith.since === null,
    pagesAfterResume,
    caughtUp,
    count: Object.keys(result.server).length,
    server: undefined,
    devices: undefined,
  };
}

async function lostPushResponse() {
  // The server applies a push whose response never arrives; the next sync sends the
  // same clientMutationID and gets the stored outcome (replayed): written once.
  const tenant = `${prefix}-lost`;
  const [a] = await twoDevices(tenant, { l: { givenName: "Lu" } });
  await a.edit("l", { givenName: "Lulu" });
  const pushes = [];
  const realFetch = globalThis.fetch;
  let dropped = false;
  globalThis.fetch = async (target, init) => {
    const response = await realFetch(target, init);
    if (String(init?.body).includes("pushChanges")) {
      const json = await response.clone().json();
      const ids = JSON.parse(init.body).variables.i.mutations.map((m) => Object.values(m)[0].clientMutationID);
      pushes.push(json.data.pushChanges.results.map((r, n) => [ids[n], r.status, r.replayed]));
      if (!dropped) {
        dropped = true;
        throw new TypeError("fetch failed: the response was lost");
      }
    }
    return response;
  };
  try {
    const lost = await a.trySync();
    await a.sync();
    const history = await gql(`query($t: ID!, $id: ID!) { history(tenantID: $t, id: $id) { items { changeToken } } }`, {
      t: tenant,
      id: "l",
    });
    return { ...(await converged(tenant, a)), lost: lost?.message ?? null, pushes, versions: history.history.items.length };
  } finally {
    globalThis.fetch = realFetch;
  }
}

async function rejectedRecord() {
  // A name the server refuses (over 200 characters): REJECTED, reported once, the
  // local create goes away; the good one in the same push is synced.
  const tenant = `${prefix}-rejected`;
  const a = new Device(tenant);
  await a.create("bad", { givenName: "x".repeat(201) });
  await a.create("good", { givenName: "fine" });
  await a.sync();
  await a.sync();
  return { ...(await converged(tenant, a)), rejected: a.rejected.map((r) => [r.id, r.code]) };
}

async function readerDeletion() {
  // A reader deletes a record: REJECTED (FORBIDDEN), reported once, the record back
  // as the server holds it at the next pull, nothing left to push, the deletion not
  // sent again. A writer whose table declares a subset of Person's columns deletes a
  // person whose undeclared field is set: applied (a deletion is guarded by the
  // token, not by the fields).
  const tenant = `${prefix}-reader`;
  const owner = new Device(tenant);
  await owner.create("kept", { givenName: "Kept", occupation: "the server's" });
  await owner.create("narrow", { givenName: "Narrow", occupation: "not declared there" });
  await owner.sync();
  const reader = new Device(tenant, { getToken: async () => readerToken });
  await reader.sync();
  await reader.remove("kept");
  await reader.sync();
  const afterSync = { restored: (await reader.docs()).kept ?? null, clean: await reader.clean() };
  await reader.sync();
  const deletionsSent = reader.requests.filter((b) => JSON.stringify(b.variables).includes("deletePerson")).length;
  const narrow = new Device(tenant, { tables: { person: { type: "PERSON", columns: { givenName: "given_name" } } } });
  await narrow.sync();
  await narrow.remove("narrow");
  const narrowStats = await narrow.sync();
  await owner.sync();
  await reader.sync();
  return {
    ...(await converged(tenant, owner, reader)),
    rejected: reader.rejected.map((r) => [r.id, r.code, r.kind]),
    afterSync,
    deletionsSent,
    narrow: { conflicts: narrowStats.conflicts, rejected: narrow.rejected.length, local: Object.keys(await narrow.docs()) },
  };
}

async function tokenRefresh() {
  // The first token is refused (UNAUTHENTICATED): the module asks for a fresh one.
  const tenant = `${prefix}-token`;
  const asked = [];
  const a = new Device(tenant, {
    getToken: async ({ refresh }) => {
      asked.push(refresh);
      return refresh ? token : "expired.or.invalid";
    },
  });
  await a.create("t", { givenName: "Tok" });
  await a.sync();
  return { ...(await converged(tenant, a)), refreshes: asked.filter(Boolean).length };
}

async function tenantDeleted() {
  // Pull: the tenant is deleted while a device holds a copy and an unsent edit.
  // Push: deleted between the pull and the push of a synchronize() (the push answers
  // TENANT_DELETED). Either way the local copy and outbox go, the app is told once.
  const out = {};
  for (const where of ["pull", "push"]) {
    const tenant = `${prefix}-gone-${where}`;
    let armed = false;
    const a = new Device(tenant, {
      beforeRequest: async (body) => {
        if (armed && body.query.includes("pushChanges")) {
          armed = false;
          await deleteTenant(tenant);
        }
      },
    });
    await a.create("g1", { givenName: "Gone" });
    await a.sync();
    await a.edit("g1", { occupation: "unsent" });
    await a.create("g2", { givenName: "unsent too" });
    if (where === "pull") await deleteTenant(tenant);
    else armed = true;
    const error = await a.trySync();
    const people = await a.people.query().fetchCount();
    const position = await a.database.adapter.getLocal("sync_api_position");
    out[where] = {
      code: error?.code ?? null,
      told: a.tenantDeleted,
      localPeople: people,
      position,
      unsynced: !(await a.clean()),
      server: await serverPeople(tenant).catch((e) => (String(e).includes("TENANT_DELETED") ? "TENANT_DELETED" : String(e))),
    };
  }
  return out;
}

// A device holding m1 and m2 of `tenant` (synced) and a blob's bytes kept locally
// (the photo recipe's keepBytes), then with three unsynced changes: an update, a
// deletion, a create. `tokens.now` is its token; `told` what onNotAMember heard.
const otherToken = process.env.WM_OTHER_TOKEN; // lists none of the scenarios' tenants
async function memberDevice(tenant) {
  const tokens = { now: token };
  const told = [];
  const a = new Device(tenant, {
    getToken: async () => tokens.now,
    onNotAMember: ({ refused }) => told.push(refused.map((r) => [r.kind, r.id]).sort()),
  });
  await a.create("m1", { givenName: "One" });
  await a.create("m2", { givenName: "Two" });
  await a.sync();
  await a.database.adapter.setLocal("bytes:ab", "a photo's bytes");
  await a.edit("m1", { occupation: "edited offline" });
  await a.remove("m2");
  await a.create("m3", { givenName: "Three" });
  return { a, tokens, told };
}
const localState = async (a) => ({
  people: await a.people.query().fetchCount(),
  position: await a.database.adapter.getLocal("sync_api_position"),
  bytes: await a.database.adapter.getLocal("bytes:ab"),
  unsynced: !(await a.clean()),
});
const byKind = (list) => list.sort((x, y) => (x[0] + x[1] < y[0] + y[1] ? -1 : 1));

async function notAMember() {
  // The device's token no longer lists the tenant (the user was removed).
  const { a, tokens, told } = await memberDevice(`${prefix}-member`);
  tokens.now = otherToken;
  const error = await a.trySync();
  const requests = a.requests.length;
  const again = await a.trySync(); // asks nothing: throws the same at once
  tokens.now = token;
  return {
    code: error?.code ?? null,
    reason: error?.reason ?? null,
    refused: byKind((error?.refused ?? []).map((r) => [r.kind, r.id])),
    told,
    rejected: byKind(a.rejected.map((r) => [r.kind, r.id, r.code, r.reason ?? null])),
    local: await localState(a),
    again: { code: again?.code ?? null, requests: a.requests.length - requests },
    server: await serverPeople(`${prefix}-member`),
  };
}

async function signOut() {
  const { a, told } = await memberDevice(`${prefix}-signout`);
  const requests = a.requests.length;
  const refused = await a.api.forgetTenant();
  return {
    refused: byKind(refused.map((r) => [r.kind, r.id, r.code])),
    requests: a.requests.length - requests,
    told: told.length,
    local: await localState(a),
    server: await serverPeople(`${prefix}-signout`),
  };
}

async function roleRefusalKeepsAll() {
  // The token lists the tenant for a reader: its changes are refused for the role.
  const { a, tokens, told } = await memberDevice(`${prefix}-role`);
  tokens.now = readerToken;
  await a.trySync();
  await a.trySync();
  const local = await localState(a);
  return {
    told: told.length,
    rejected: byKind(a.rejected.map((r) => [r.kind, r.id, r.code, r.reason ?? null])),
    device: await a.docs(),
    position: Boolean(local.position),
    bytes: local.bytes ? "kept" : null,
  };
}

async function unreachableKeepsAll() {
  const { a, told } = await memberDevice(`${prefix}-unreachable`);
  a.offline = true;
  const error = await a.trySync();
  const local = await localState(a);
  a.offline = false;
  await a.sync();
  return {
    error: error?.name ?? null,
    told: told.length,
    during: { people: local.people, unsynced: local.unsynced, position: Boolean(local.position), bytes: local.bytes ? "kept" : null },
    server: await serverPeople(`${prefix}-unreachable`),
  };
}

async function realtime() {
  // Both devices live (changesAvailable over graphql-ws): a create on A reaches B,
  // B's edit reaches A, A's deletion reaches B, without polling.
  const tenant = `${prefix}-live`;
  const a = new Device(tenant);
  const b = new Device(tenant);
  await a.sync();
  await b.sync();
  const stopA = a.api.live({ webSocketImpl: WebSocket });
  const stopB = b.api.live({ webSocketImpl: WebSocket });
  await sleep(500);
  let started = Date.now();
  const waitFor = async (device, check) => {
    while (Date.now() - started < 10000) {
      if (check(await device.docs())) return Date.now() - started;
      await sleep(20);
    }
    return null;
  };
  const ms = {};
  await a.create("r1", { givenName: "Ray" });
  started = Date.now();
  await a.sync();
  ms.aToB = await waitFor(b, (d) => d.r1?.givenName === "Ray");
  await b.edit("r1", { occupation: "pilot" });
  started = Date.now();
  await b.sync();
  ms.bToA = await waitFor(a, (d) => d.r1?.occupation === "pilot");
  await a.remove("r1");
  started = Date.now();
  await a.sync();
  ms.deleteAToB = await waitFor(b, (d) => !("r1" in d));
  await sleep(300);
  await stopA();
  await stopB();
  return { ...(await converged(tenant, a, b)), ms };
}

async function silentPush() {
  // A silent push whose token is ahead of the copy's makes the device sync; an older
  // one, or another tenant's, makes no request.
  const tenant = `${prefix}-silent`;
  const [a, b] = await twoDevices(tenant, { p: { givenName: "Pat" } });
  await a.edit("p", { givenName: "Patty" });
  await a.sync();
  const { changes } = await gql(`query($t: ID!) { changes(tenantID: $t) { changeToken } }`, { t: tenant });
  const before = b.requests.length;
  const stale = await b.api.onPush({ tenantID: tenant, changeToken: "0".repeat(26) });
  const other = await b.api.onPush({ tenantID: `${tenant}-x`, changeToken: changes.changeToken });
  const idle = b.requests.length - before;
  const waiting = (await b.docs()).p?.givenName ?? null;
  const pulled = await b.api.onPush({ tenantID: tenant, changeToken: changes.changeToken });
  const after = (await b.docs()).p?.givenName ?? null;
  const again = await b.api.onPush({ tenantID: tenant, changeToken: changes.changeToken });
  return { stale, other, idle, waiting, pulled, after, again };
}

async function photoRecipe() {
  // The README's recipe: upload the bytes, store the reference in the column, sync;
  // another device pulls the reference and downloads the same bytes.
  const tenant = `${prefix}-photo`;
  const api = { url, getToken: async () => token, tenantID: tenant };
  const a = new Device(tenant);
  const b = new Device(tenant);
  const bytes = crypto.getRandomValues(new Uint8Array(4000));
  const ref = await uploadAttachment({ ...api, data: bytes, contentType: "image/png" });
  await a.create("ph", { givenName: "Pic", photo: JSON.stringify(ref) });
  await a.sync();
  await b.sync();
  const pulled = (await b.docs()).ph.photo;
  const link = await attachmentURL(api, pulled.sha256);
  const downloaded = new Uint8Array(await (await fetch(link.url)).arrayBuffer());
  return {
    ...(await converged(tenant, a, b)),
    ref,
    pulled,
    identical: (await hashAttachment(downloaded, "image/png")).sha256 === ref.sha256,
  };
}

async function randomRun(seed) {
  // Three devices, random creates, edits and deletions, going offline and online;
  // then every device syncs twice.
  const tenant = `${prefix}-random-${seed}`;
  let x = seed;
  const rand = () => (x = (x * 1103515245 + 12345) % 2147483648) / 2147483648;
  const devices = [new Device(tenant), new Device(tenant), new Device(tenant)];
  let created = 0;
  for (let step = 0; step < 80; step++) {
    const d = devices[Math.floor(rand() * devices.length)];
    const r = rand();
    if (r < 0.1) {
      d.offline = !d.offline;
      continue;
    }
    const docs = Object.keys(await d.docs());
    if (r < 0.35 || docs.length === 0) {
      await d.create(`r${seed}-${created++}`, { givenName: `g${step}` });
    } else if (r < 0.8) {
      const field = ["givenName", "familyName", "occupation"][Math.floor(rand() * 3)];
      await d.edit(docs[Math.floor(rand() * docs.length)], { [field]: `${field}-${step}` });
    } else {
      await d.remove(docs[Math.floor(rand() * docs.length)]);
    }
    if (rand() < 0.4) await d.trySync();
  }
  for (const d of devices) d.offline = false;
  for (let round = 0; round < 2; round++) for (const d of devices) await d.sync();
  const result = await converged(tenant, ...devices);
  return { equal: result.equal, clean: result.clean, serverCount: Object.keys(result.server).length };
}

// Release 2 of the app (tests/apps/release2/, served by the report's server):
// people gain a `nickname` column, and a table `notes` (type NOTE) comes, by a
// WatermelonDB migration (schema version 1 -> 2, migrationsEnabledAtVersion: 1).
const optional = (name) => ({ name, type: "string", isOptional: true });
const schemaV2 = release2.schema;
const migrationsV2 = release2.migrations;
const TABLES_V2 = release2.tables;
class Note extends Model {
  static table = "note";
}
class Member extends Model {
  static table = "member";
}

// A release 1 app (schema version 1, its migrations enabled from 1), upgraded in
// place to release 2 (the same LokiJS storage, cloned with WatermelonDB's testClone,
// migrated to version 2), as an app update does.
async function releaseApp(tenant, release, previous = null) {
  const app = { via: null }; // another server's /graphql (a rollback, a retired release)
  const options = { schema: release === 1 ? schema : schemaV2, migrations: release === 1 ? schemaMigrations({ migrations: [] }) : migrationsV2 };
  const adapter = previous
    ? await previous.adapter.underlyingAdapter.testClone(options)
    : new LokiJSAdapter({ ...options, useWebWorker: false, useIncrementalIndexedDB: false, dbName: `upgrade-${tenant}` });
  const database = new Database({ adapter, modelClasses: release === 1 ? [Person, Reminder] : [Person, Reminder, Note, Member] });
  const errors = [];
  const api = createSyncAPI({
    database,
    url,
    tenantID: tenant,
    getToken: async () => token,
    tables: release === 1 ? TABLES : TABLES_V2,
    release,
    migrationsEnabledAtVersion: 1,
    limit: 5, // pages: the catch-up's too
    onRejected: (r) => errors.push(r.code),
    fetch: (target, init) => {
      const to = app.via ?? target;
      if (app.viaOnce) app.via = app.viaOnce = null; // one request there (a rolling deploy)
      return fetch(to, init);
    },
  });
  return Object.assign(app, { database, api, errors });
}

async function syncError(app) {
  try {
    await app.api.sync();
    return null;
  } catch (error) {
    return { code: error.code ?? String(error), servedRelease: error.servedRelease ?? null };
  }
}

// A person's or a note's fields on the (release 2) server; null when it holds none.
async function serverItem(id, tenant, key = "person") {
  const fields = key === "person" ? "givenName nickname" : "text";
  const data = await gql(`query($t: ID!, $id: ID!) { ${key}(tenantID: $t, id: $id) { ${fields} } }`, { t: tenant, id }).catch(() => null);
  return data?.[key] ?? null;
}

const addPerson = (app, id, raw) =>
  app.database.write(() =>
    app.database.get("person").create((r) => {
      r._raw.id = id;
      for (const [c, v] of Object.entries(raw)) r._setRaw(c, v);
    }),
  );

async function upgradeRequired() {
  // A server that retired release 1 (MIN_CLIENT_RELEASE=2): the release 1 app's sync
  // throws UPGRADE_REQUIRED and its unsent record stays; the updated app sends it.
  const tenant = `${prefix}-retired`;
  const old = await releaseApp(tenant, 1);
  old.via = process.env.WM_MIN2_URL;
  await addPerson(old, "q", { given_name: "Queued" });
  const refused = await syncError(old);
  const kept = await hasUnsyncedChanges({ database: old.database });
  const app = await releaseApp(tenant, 2, old.database);
  app.via = process.env.WM_MIN2_URL;
  const after = await syncError(app);
  return { refused, kept, after, server: await serverItem("q", tenant), clean: !(await hasUnsyncedChanges({ database: app.database })) };
}

async function rollingDeploy() {
  // Behind one address during a rolling deploy: the first request reaches a release
  // 1 server, which refuses the app's documents; asked again with release 1's, a
  // release 2 server answers, with versions holding a nickname they do not select.
  // Stored so, the token past them, the nickname never came.
  const tenant = `${prefix}-rolling`;
  await gql(`mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status } } }`, {
    i: { tenantID: tenant, mutations: [{ createPerson: { tenantID: tenant, id: "f", person: { givenName: "Fay", nickname: "F" } } }] },
  });
  const app = await releaseApp(tenant, 2);
  app.via = process.env.WM_RELEASE1_URL;
  app.viaOnce = true;
  const error = await syncError(app);
  const f = await app.database.get("person").find("f");
  return { error, nickname: f._raw.nickname };
}

async function rollback() {
  // A release 2 app served by a release 1 server (a rollback), then by a release 2
  // server again. During the rollback it asks with release 1's documents (its
  // tables' `release` and `fieldReleases`): what a release 1 app wrote there, and a
  // nickname cleared before it (a version that server renders whole), arrive;
  // nothing after a nickname set meanwhile (a version it cannot render whole: its
  // page ends there) does. Its edit of a release 1 field goes; its nickname edits
  // and its note wait (the sync throws HELD_FOR_RELEASE, naming the release served),
  // and go once a release 2 server answers.
  const tenant = `${prefix}-rollback`;
  const old = process.env.WM_RELEASE1_URL;
  const person = (id, fields) => ({ createPerson: { tenantID: tenant, id, person: fields } });
  const push = async (mutations, at = url) => {
    const data = await gql(`mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status } } }`, { i: { tenantID: tenant, mutations } }, at);
    if (data.pushChanges.results.some((r) => r.status !== "APPLIED")) throw new Error(JSON.stringify(data));
  };
  const update = async (id, changes) => {
    const { person: at } = await gql(`query($t: ID!, $id: ID!) { person(tenantID: $t, id: $id) { changeToken } }`, { t: tenant, id });
    await push([{ updatePerson: { tenantID: tenant, id, changeToken: at.changeToken, changes } }]);
  };
  await push([
    person("k", { givenName: "Known", nickname: "Kay" }),
    person("plain", { givenName: "Plain" }),
    person("cleared", { givenName: "Cleared", nickname: "Gone" }),
    person("late", { givenName: "Late" }),
  ]);
  const app = await releaseApp(tenant, 2);
  await app.api.sync();
  const people = app.database.get("person");
  const edit = (id, column, value) => app.database.write(async () => (await people.find(id)).update((r) => r._setRaw(column, value)));
  // Offline: an edit of a release 1 field, a nickname set, a person with one, a note.
  await edit("k", "family_name", "Edited");
  await edit("plain", "nickname", "Plainy");
  await addPerson(app, "r", { given_name: "Rolled", nickname: "Rolly" });
  await app.database.write(() => app.database.get("note").create((r) => { r._raw.id = "rn"; r._setRaw("text", "kept"); }));
  // Meanwhile a release 2 app clears a nickname; then the rollback, where a release 1
  // app creates a person, a release 2 app (on a server of its own) creates a note
  // (a type release 1 lacks) and sets a nickname, and the release 1 app creates
  // another person.
  await update("cleared", { nickname: null });
  await push([person("made", { givenName: "Made on release 1" })], old);
  await push([{ createNote: { tenantID: tenant, id: "sn", note: { text: "from release 2" } } }]);
  await update("late", { nickname: "Late" });
  await push([person("made2", { givenName: "Made after it" })], old);
  const local = async () => {
    const out = {};
    for (const r of await people.query().fetch()) {
      out[r.id] = Object.fromEntries(
        [["givenName", "given_name"], ["familyName", "family_name"], ["nickname", "nickname"]]
          .filter(([, c]) => r._raw[c] !== null && r._raw[c] !== "")
          .map(([f, c]) => [f, r._raw[c]]),
      );
    }
    return out;
  };
  const serverAll = async () => {
    const out = {};
    for (const id of ["k", "plain", "cleared", "late", "made", "made2", "r"]) {
      const data = await gql(`query($t: ID!, $id: ID!) { person(tenantID: $t, id: $id) { givenName familyName nickname } }`, { t: tenant, id }).catch(() => null);
      if (data?.person) out[id] = Object.fromEntries(Object.entries(data.person).filter(([, v]) => v !== null));
    }
    return out;
  };
  app.via = old;
  const refused = await syncError(app);
  const notes = async () => (await app.database.get("note").query().fetch()).map((r) => [r.id, r._raw.text]).sort();
  const during = { device: await local(), notes: await notes(), server: await serverAll(), note: await serverItem("rn", tenant, "note"), kept: await hasUnsyncedChanges({ database: app.database }) };
  app.via = null;
  const after = await syncError(app);
  return {
    refused,
    during,
    after,
    device: await local(),
    notes: await notes(),
    server: await serverAll(),
    note: await serverItem("rn", tenant, "note"),
    clean: !(await hasUnsyncedChanges({ database: app.database })),
  };
}

async function serverCreates(tenant, mutations) {
  const data = await gql(`mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status } } }`, {
    i: { tenantID: tenant, mutations },
  });
  if (data.pushChanges.results.some((r) => r.status !== "APPLIED")) throw new Error(JSON.stringify(data));
}

async function upgradeCatchesUp() {
  // Written by a release 2 app before this device's upgrade: 9 people (7 with a
  // nickname) and 11 notes; the release 1 device syncs them (its pulls leave out
  // the notes, and do not select nicknames), then 2 more nicknames are set. At its
  // upgrade, the migration sync names the table and the column it added: the
  // module catches up on those (catchUp, up to its token) and pulls on.
  const tenant = `${prefix}-upgrade`;
  const people = Array.from({ length: 9 }, (_, i) => ({
    createPerson: { tenantID: tenant, id: `p${i}`, person: { givenName: `P${i}`, ...(i < 7 ? { nickname: `nick${i}` } : {}) } },
  }));
  const notes = Array.from({ length: 11 }, (_, i) => ({ createNote: { tenantID: tenant, id: `n${i}`, note: { text: `note ${i}` } } }));
  await serverCreates(tenant, [...people, ...notes]);
  const old = await releaseApp(tenant, 1);
  await old.api.sync();
  const before = (await old.database.get("person").query().fetch()).length;
  await old.database.write(async () => (await old.database.get("person").find("p0")).update((r) => r._setRaw("occupation", "offline edit")));
  for (const id of ["p7", "p8"]) await serverEdit(tenant, id, { nickname: `late ${id}` });
  const app = await releaseApp(tenant, 2, old.database);
  const stats = await app.api.sync();
  const rows = await app.database.get("person").query().fetch();
  const nicknames = Object.fromEntries(rows.map((r) => [r.id, r._raw.nickname || null]));
  const server = await gql(
    `query($t: ID!) { changes(tenantID: $t, limit: 1000) { items { __typename id ... on Person { nickname occupation } } } }`,
    { t: tenant },
  );
  return {
    before,
    notes: (await app.database.get("note").query().fetch()).length,
    nicknames: Object.values(nicknames).filter((v) => v !== null).length,
    people: rows.length,
    caughtUp: stats.caughtUp,
    pages: stats.pages,
    pushed: server.changes.items.find((i) => i.id === "p0")?.occupation ?? null,
    clean: !(await hasUnsyncedChanges({ database: app.database })),
    errors: [...old.errors, ...app.errors],
  };
}

// An app whose first schema left out content of the catalog's first release (the
// reminders table, the people's occupation column), then declares it by a migration:
// the release stays 1, the schema version grows.
const NARROW = { givenName: "given_name", familyName: "family_name" };
const narrowSchema = appSchema({
  version: 1,
  tables: [tableSchema({ name: "person", columns: [...Object.values(NARROW).map(optional), ...syncColumns()] })],
});
const widerSchema = appSchema({
  version: 2,
  tables: [
    tableSchema({ name: "person", columns: [...narrowSchema.tables.person.columnArray, optional("occupation")] }),
    tableSchema({ name: "reminder", columns: schema.tables.reminder.columnArray }),
  ],
});
const widerMigrations = schemaMigrations({
  migrations: [
    {
      toVersion: 2,
      steps: [
        addColumns({ table: "person", columns: [optional("occupation")] }),
        createTable({ name: "reminder", columns: schema.tables.reminder.columnArray }),
      ],
    },
  ],
});

async function firstReleaseApp(tenant, wider, previous = null) {
  const options = { schema: wider ? widerSchema : narrowSchema, migrations: wider ? widerMigrations : schemaMigrations({ migrations: [] }) };
  const adapter = previous
    ? await previous.adapter.underlyingAdapter.testClone(options)
    : new LokiJSAdapter({ ...options, useWebWorker: false, useIncrementalIndexedDB: false, dbName: `first-${tenant}` });
  const database = new Database({ adapter, modelClasses: wider ? [Person, Reminder] : [Person] });
  const tables = wider
    ? { person: { type: "PERSON", columns: { ...NARROW, occupation: "occupation" } }, reminder: TABLES.reminder }
    : { person: { type: "PERSON", columns: NARROW } };
  const errors = [];
  const api = createSyncAPI({
    database, url, tenantID: tenant, getToken: async () => token, tables, release: 1,
    migrationsEnabledAtVersion: 1, limit: 5, onRejected: (r) => errors.push(r.code),
  });
  return { database, api, errors };
}

async function firstReleaseCatchesUp() {
  // 9 people (6 with an occupation) and 11 reminders, written before the device's
  // first sync; its migration sync names the table and the column it added, both of
  // release 1: the catch-up brings every reminder and every occupation.
  const tenant = `${prefix}-first`;
  const people = Array.from({ length: 9 }, (_, i) => ({
    createPerson: { tenantID: tenant, id: `p${i}`, person: { givenName: `P${i}`, ...(i < 6 ? { occupation: `job${i}` } : {}) } },
  }));
  const reminders = Array.from({ length: 11 }, (_, i) => ({ createReminder: { tenantID: tenant, id: `r${i}`, reminder: { title: `R${i}` } } }));
  await serverCreates(tenant, [...people, ...reminders]);
  const old = await firstReleaseApp(tenant, false);
  await old.api.sync();
  const before = (await old.database.get("person").query().fetch()).length;
  const app = await firstReleaseApp(tenant, true, old.database);
  const stats = await app.api.sync();
  const rows = await app.database.get("person").query().fetch();
  return {
    before,
    people: rows.length,
    occupations: rows.filter((r) => r._raw.occupation).length,
    reminders: (await app.database.get("reminder").query().fetch()).length,
    caughtUp: stats.caughtUp,
    clean: !(await hasUnsyncedChanges({ database: app.database })),
    errors: [...old.errors, ...app.errors],
  };
}

async function rollbackDeletionsAtUpgrade() {
  // A release 2 app gave p1 and p2 a nickname; through a release 1 server (a
  // rollback) p1 is deleted, p2 edited then deleted, p3 edited. A release 1 device
  // synced the deletions; upgraded to release 2, its catch-up brings p3's nickname
  // and neither deleted person back.
  const tenant = `${prefix}-undead`;
  const old1 = process.env.WM_RELEASE1_URL;
  const people = [1, 2, 3].map((i) => ({ createPerson: { tenantID: tenant, id: `p${i}`, person: { givenName: `P${i}`, nickname: `nick${i}` } } }));
  await serverCreates(tenant, people);
  const old = await releaseApp(tenant, 1);
  await old.api.sync();
  const tokenOf = async (id) => (await gql(`query($t: ID!, $id: ID!) { person(tenantID: $t, id: $id) { changeToken } }`, { t: tenant, id }, old1)).person.changeToken;
  const through = (mutations) =>
    gql(`mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status } } }`, { i: { tenantID: tenant, mutations } }, old1);
  await through([
    { deletePerson: { tenantID: tenant, id: "p1", changeToken: await tokenOf("p1") } },
    { updatePerson: { tenantID: tenant, id: "p2", changeToken: await tokenOf("p2"), changes: { familyName: "L" } } },
    { updatePerson: { tenantID: tenant, id: "p3", changeToken: await tokenOf("p3"), changes: { familyName: "L" } } },
  ]);
  await through([{ deletePerson: { tenantID: tenant, id: "p2", changeToken: await tokenOf("p2") } }]);
  await old.api.sync();
  const before = (await old.database.get("person").query().fetch()).map((r) => r.id).sort();
  const app = await releaseApp(tenant, 2, old.database);
  const stats = await app.api.sync();
  const rows = await app.database.get("person").query().fetch();
  return {
    before,
    after: Object.fromEntries(rows.map((r) => [r.id, r._raw.nickname || null])),
    caughtUp: stats.caughtUp,
    clean: !(await hasUnsyncedChanges({ database: app.database })),
    errors: [...old.errors, ...app.errors],
  };
}

async function resyncAcrossTheHorizon() {
  // Against a server keeping deletions 2 s (RETENTION_SECONDS=2): B is away 3 s with
  // an edit and a create of its own; it gets RESYNC_REQUIRED, reads the tenant again,
  // drops the record deleted meanwhile and pushes its edits.
  const tenant = `${prefix}-resync`;
  const [a, b] = await twoDevices(tenant, { x: { givenName: "x" }, y: { givenName: "y" }, z: { givenName: "z" } });
  b.offline = true;
  await a.remove("x");
  await a.edit("y", { familyName: "changed" });
  await a.sync();
  await b.edit("z", { occupation: "offline edit" });
  await b.create("w", { givenName: "created offline" });
  await sleep(3000);
  b.offline = false;
  await b.sync();
  await a.sync();
  return { ...(await converged(tenant, a, b)), resyncs: b.resyncs };
}

const named = { resyncAcrossTheHorizon };
const everyday = {
  bulkPull,
  offlineEdits,
  deleteVersusEdit,
  manyOfflineEdits,
  interruptedPull,
  lostPushResponse,
  rejectedRecord,
  readerDeletion,
  tokenRefresh,
  silentPush,
  tenantDeleted,
  notAMember,
  signOut,
  roleRefusalKeepsAll,
  unreachableKeepsAll,
  realtime,
  photoRecipe,
  random1: () => randomRun(1),
  random2: () => randomRun(2),
  upgradeCatchesUp,
  firstReleaseCatchesUp,
  rollbackDeletionsAtUpgrade,
  upgradeRequired,
  rollback,
  rollingDeploy,
};
const only = process.argv[5]?.split(",");
const chosen = only ? Object.fromEntries(only.map((n) => [n, { ...everyday, ...named }[n]])) : everyday;
const report = {};
for (const [name, run] of Object.entries(chosen)) {
  const started = Date.now();
  try {
    const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error(`${name} did not finish in 60 s`)), 60000));
    report[name] = await Promise.race([run(), timeout]);
  } catch (error) {
    report[name] = { failed: String(error?.stack ?? error) };
  }
  report[name].seconds = (Date.now() - started) / 1000;
}
console.log(JSON.stringify(report));
process.exit(0);

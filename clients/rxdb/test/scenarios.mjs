// RxDB (memory storage, its DEFAULT conflict handler, no internals touched) replicating
// through the API with replicateSyncAPI. Usage:
//   node scenarios.mjs <graphql url> <bearer token> <tenant prefix>
// Prints one JSON line: each scenario's findings, for tests/ecosystem/test_rxdb.py.
import { addRxPlugin, createRxDatabase } from "rxdb";
import { RxDBMigrationSchemaPlugin } from "rxdb/plugins/migration-schema";
import { getRxStorageMemory } from "rxdb/plugins/storage-memory";
import { fieldLevelConflictHandler, forgetTenant, replicateSyncAPI } from "../index.js";
import { attachmentURL, hashAttachment, uploadAttachment } from "../index.js";
import { addCollections, attachPhoto, photoURL, replicatePeople } from "../example.mjs";
// The tests' app (tests/apps/release2/) as scripts/generate-clients writes its
// collection schemas for each release (clients/N/rxdb/schemas.json, copied beside the
// module by tests/support/rxdb.py), never by hand.
import release1Schemas from "../generated/release2/1/rxdb/schemas.json" with { type: "json" };
import release2Schemas from "../generated/release2/2/rxdb/schemas.json" with { type: "json" };

// Active changesAvailable subscriptions on open sockets, counted from what the
// client sends (subscribe, complete), whoever opened the socket: on the WebSocket the
// module uses, the platform's (Node 22), else the ws package's.
const WebSocket = globalThis.WebSocket ?? (await import("ws")).WebSocket;
const activeBySocket = new Map();
const send = WebSocket.prototype.send;
WebSocket.prototype.send = function (data, ...rest) {
  const type = typeof data === "string" ? JSON.parse(data).type : null;
  if (type === "subscribe" || type === "complete") {
    activeBySocket.set(this, (activeBySocket.get(this) ?? 0) + (type === "subscribe" ? 1 : -1));
  }
  return send.call(this, data, ...rest);
};
const activeSubscriptions = () =>
  [...activeBySocket].filter(([ws]) => ws.readyState === WebSocket.OPEN).reduce((n, [, c]) => n + c, 0);
const openSockets = () =>
  [...activeBySocket.keys()].filter((ws) => ws.readyState === WebSocket.OPEN).length;

addRxPlugin(RxDBMigrationSchemaPlugin);

const [url, token, prefix] = process.argv.slice(2);
const auth = { Authorization: `Bearer ${token}` };
// The people collection of the app's release 1 (schema version 0).
const schema = release1Schemas.Person;
// A partial schema on purpose (no release's generated file leaves out a field of its
// own release): release 1's without `phoneNumber`, a collection declaring some of
// Person's fields (the subset deletion; the first-release field's catch-up).
const { phoneNumber: _phone, ...withoutPhone } = schema.properties;
const schemaWithoutPhone = { ...schema, properties: withoutPhone };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let deviceCount = 0;

async function gql(query, variables) {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...auth },
    body: JSON.stringify({ query, variables }),
  });
  const body = await response.json();
  if (body.errors) throw new Error(JSON.stringify(body.errors));
  return body.data;
}

async function serverPeople(tenant) {
  const people = {};
  let cursor = null;
  for (;;) {
    const data = await gql(
      `query($t: ID!, $c: String) { changes(tenantID: $t, cursor: $c, limit: 1000) {
        items { __typename id ... on Person { givenName familyName occupation } } cursor } }`,
      { t: tenant, c: cursor },
    );
    for (const item of data.changes.items) {
      if (item.__typename === "Person") {
        const { __typename, id, ...rest } = item;
        people[item.id] = Object.fromEntries(Object.entries(rest).filter(([, v]) => v !== null));
      } else if (item.__typename === "DeletedItem") delete people[item.id];
    }
    if (!data.changes.cursor) return people;
    cursor = data.changes.cursor;
  }
}

class Device {
  constructor(tenant, options = {}) {
    this.tenant = tenant;
    this.options = options;
    this.name = `d${++deviceCount}`;
    this.errors = [];
  }
  async open() {
    this.db = await createRxDatabase({ name: this.name, storage: getRxStorageMemory(), multiInstance: false });
    const conflictHandler = this.options.conflictHandler;
    const people = { schema: this.options.schema ?? schema, ...(conflictHandler ? { conflictHandler } : {}) };
    await this.db.addCollections({ people });
    this.people = this.db.people;
    return this;
  }
  online() {
    this.state = replicateSyncAPI({
      collection: this.people,
      url,
      tenantID: this.tenant,
      type: "PERSON",
      headers: this.options.headers ?? (async () => auth), // a function: refreshed on every request
      ...(this.options.wsUrl === false ? { wsUrl: false } : {}),
      batchSize: this.options.batchSize ?? 50,
      waitForLeadership: false,
      retryTime: 200,
      replicationIdentifier: `${this.name}-${this.tenant}`,
      onResync: this.options.onResync,
      onTenantDeleted: this.options.onTenantDeleted,
      onRejected: this.options.onRejected,
      onNotAMember: this.options.onNotAMember,
      tenantCollections: this.options.tenantCollections?.(this.db) ?? [],
    });
    this.state.error$.subscribe((e) => this.errors.push(e.parameters?.errors?.[0]?.code ?? e.code));
    return this.state;
  }
  async offline() {
    if (this.state) await this.state.cancel();
    this.state = null;
  }
  async sync() {
    if (!this.state) this.online();
    await this.state.awaitInitialReplication();
    this.state.reSync();
    await this.state.awaitInSync();
  }
  async docs() {
    const all = await this.people.find().exec();
    return Object.fromEntries(
      all.map((d) => {
        const { id, ...rest } = d.toJSON();
        return [id, rest];
      }),
    );
  }
  async edit(id, patch) {
    const doc = await this.people.findOne(id).exec();
    await doc.incrementalPatch(patch);
  }
  async remove(id) {
    const doc = await this.people.findOne(id).exec();
    await doc.remove();
  }
  async close() {
    await this.offline();
    await this.db.close();
  }
}

const same = (a, b) => JSON.stringify(sorted(a)) === JSON.stringify(sorted(b));
function sorted(o) {
  if (Array.isArray(o) || o === null || typeof o !== "object") return o;
  return Object.fromEntries(Object.keys(o).sort().map((k) => [k, sorted(o[k])]));
}

// Two devices of one tenant that both hold `doc`, written by the first and synced.
async function twoDevicesWith(tenant, doc) {
  const a = await new Device(tenant).open();
  const b = await new Device(tenant).open();
  await a.people.insert(doc);
  await a.sync();
  await b.sync();
  return [tenant, a, b];
}

// What both devices and the server hold, and whether they are equal; closes both.
async function converged(tenant, a, b) {
  const result = { a: await a.docs(), b: await b.docs(), server: await serverPeople(tenant) };
  await a.close();
  await b.close();
  return { ...result, equal: same(result.a, result.b) && same(result.a, result.server) };
}

async function bulkPull() {
  const tenant = `${prefix}-bulk`;
  for (let batch = 0; batch < 3; batch++) {
    const mutations = [];
    for (let i = 0; i < 100 && batch * 100 + i < 250; i++) {
      const n = batch * 100 + i;
      mutations.push({ createPerson: { tenantID: tenant, id: `p${n}`, person: { givenName: `n${n}` } } });
      if (i % 10 === 0) mutations.push({ createReminder: { tenantID: tenant, reminder: { title: "x" } } });
    }
    await gql(`mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status } } }`, {
      i: { tenantID: tenant, mutations: mutations.slice(0, 100) },
    });
    if (mutations.length > 100) {
      await gql(`mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status } } }`, {
        i: { tenantID: tenant, mutations: mutations.slice(100) },
      });
    }
  }
  const device = await new Device(tenant, { batchSize: 50 }).open();
  let pages = 0;
  const state = device.online();
  state.received$.subscribe(() => {});
  const originalFetch = globalThis.fetch;
  globalThis.fetch = (request, ...rest) => {
    if (request instanceof Request && request.url === url) pages++;
    return originalFetch(request, ...rest);
  };
  await device.sync();
  globalThis.fetch = originalFetch;
  const docs = await device.docs();
  const server = await serverPeople(tenant);
  await device.close();
  return { count: Object.keys(docs).length, equal: same(docs, server), requests: pages };
}

async function twoDevicesConverge() {
  const [tenant, a, b] = await twoDevicesWith(`${prefix}-two`, { id: "x", givenName: "Ann" });
  await b.edit("x", { familyName: "Lovelace" });
  await b.sync();
  await a.sync();
  return converged(tenant, a, b);
}

async function concurrentFieldEdits() {
  const [tenant, a, b] = await twoDevicesWith(`${prefix}-fields`, { id: "y", givenName: "Ann", occupation: "none" });
  await a.offline();
  await b.offline();
  await a.edit("y", { givenName: "Anna" }); // offline, on both devices
  await b.edit("y", { occupation: "mathematician" });
  await a.sync();
  await b.sync();
  await a.sync();
  return converged(tenant, a, b);
}

async function twoEditsInARow() {
  const tenant = `${prefix}-row`;
  const a = await new Device(tenant).open();
  a.online();
  await a.people.insert({ id: "z", givenName: "one" });
  await a.edit("z", { givenName: "two" }); // before any pull of its own create
  await a.state.awaitInSync();
  await a.edit("z", { givenName: "three" });
  await a.sync();
  const result = { device: await a.docs(), server: await serverPeople(tenant), errors: a.errors };
  await a.close();
  return result;
}

async function pullOverlappingPush() {
  const [tenant, a, b] = await twoDevicesWith(`${prefix}-overlap`, { id: "w", givenName: "Ann", occupation: "a" });
  // B writes while A pushes its own edit of the same document: A's pull of B's write
  // overlaps A's push.
  const bWrites = (async () => {
    await b.edit("w", { occupation: "b" });
    await b.sync();
  })();
  await a.edit("w", { givenName: "Anna" });
  await bWrites;
  await a.sync();
  await b.sync();
  await a.sync();
  return converged(tenant, a, b);
}

async function deleteVersusEdit() {
  const [tenant, a, b] = await twoDevicesWith(`${prefix}-delete`, { id: "v", givenName: "Ann" });
  await a.offline();
  await b.offline();
  await a.remove("v");
  await b.edit("v", { givenName: "Anna" });
  await a.sync(); // the deletion first
  await b.sync(); // the edit: a conflict with the DeletedItem; master wins
  await a.sync();
  return converged(tenant, a, b);
}

async function subsetDeletion() {
  // The collection declares some of Person's fields (no phoneNumber, as the README's
  // example): a person whose phoneNumber another client set is deleted on A. It is a
  // deletion, undeclared fields do not matter: applied, and B drops the person too.
  const tenant = `${prefix}-subset`;
  const person = { givenName: "Sam", phoneNumber: "+1 555 0100" };
  await gql(`mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status } } }`, {
    i: { tenantID: tenant, mutations: [{ createPerson: { tenantID: tenant, id: "s", person } }] },
  });
  const a = await new Device(tenant, { schema: schemaWithoutPhone }).open();
  const b = await new Device(tenant, { schema: schemaWithoutPhone }).open();
  await a.sync();
  await b.sync();
  await a.remove("s");
  await a.sync();
  await b.sync();
  const errors = [...a.errors, ...b.errors];
  return { ...(await converged(tenant, a, b)), errors };
}

async function lostPushResponse() {
  const tenant = `${prefix}-lost`;
  const a = await new Device(tenant).open();
  await a.people.insert({ id: "u", givenName: "Ann" });
  await a.sync();
  const originalFetch = globalThis.fetch;
  const pushes = [];
  let dropped = 0;
  globalThis.fetch = async (request, ...rest) => {
    const body = request instanceof Request ? await request.clone().text() : "";
    const response = await originalFetch(request, ...rest);
    if (body.includes("pushChanges")) {
      const json = await response.clone().json();
      pushes.push(json.data.pushChanges.results.map((r) => [r.clientMutationID, r.status, r.replayed]));
      if (dropped === 0) {
        dropped++;
        throw new TypeError("network error: the response was lost"); // applied, never heard
      }
    }
    return response;
  };
  await a.edit("u", { givenName: "Anna" });
  await sleep(100);
  await a.state.awaitInSync();
  globalThis.fetch = originalFetch;
  await a.sync();
  const result = {
    pushes,
    device: await a.docs(),
    server: await serverPeople(tenant),
    errors: a.errors,
  };
  await a.close();
  return result;
}

async function rejectedRow() {
  // Data the server refuses (a name over 200 characters) is REJECTED: reported on
  // error$, answered with the server's state (nothing: the local create goes away),
  // and not retried forever.
  const tenant = `${prefix}-rejected`;
  const a = await new Device(tenant).open();
  await a.people.insert({ id: "bad", givenName: "x".repeat(201) });
  await a.people.insert({ id: "good", givenName: "fine" });
  await a.sync();
  await sleep(500);
  await a.sync();
  const result = { device: await a.docs(), server: await serverPeople(tenant), errors: a.errors };
  await a.close();
  return result;
}

async function pokeDrivesPull() {
  // B only listens (live, no reSync): the changesAvailable subscription makes it pull.
  const tenant = `${prefix}-poke`;
  const a = await new Device(tenant).open();
  const b = await new Device(tenant).open();
  b.online();
  await b.state.awaitInitialReplication();
  await sleep(300); // the subscription is up
  await a.people.insert({ id: "k", givenName: "Kim" });
  const started = Date.now();
  await a.sync();
  let arrived = null;
  while (Date.now() - started < 10000) {
    if (await b.people.findOne("k").exec()) {
      arrived = Date.now() - started;
      break;
    }
    await sleep(20);
  }
  await a.close();
  await b.close();
  return { arrivedMs: arrived };
}

async function silentPush() {
  // A device without a socket (an app in the background): a silent push whose token is
  // ahead of its checkpoint makes it pull; an older one, or another tenant's, asks
  // the server nothing (every request calls the headers function).
  const tenant = `${prefix}-silent`;
  const a = await new Device(tenant).open();
  let asked = 0;
  const headers = async () => {
    asked++;
    return auth;
  };
  const b = await new Device(tenant, { wsUrl: false, headers }).open();
  await a.people.insert({ id: "p", givenName: "Pat" });
  await a.sync();
  b.online();
  await b.state.awaitInitialReplication();
  await b.state.awaitInSync();
  const first = (await b.docs()).p?.givenName ?? null;
  await a.edit("p", { givenName: "Patty" });
  await a.sync();
  const { changes } = await gql(`query($t: ID!) { changes(tenantID: $t) { changeToken } }`, { t: tenant });
  const before = asked;
  const stale = await b.state.onPush({ tenantID: tenant, changeToken: "0".repeat(26) });
  const other = await b.state.onPush({ tenantID: `${tenant}-x`, changeToken: changes.changeToken });
  const idle = asked - before;
  const waiting = (await b.docs()).p?.givenName ?? null;
  const pulled = await b.state.onPush({ tenantID: tenant, changeToken: changes.changeToken });
  const after = (await b.docs()).p?.givenName ?? null;
  await a.close();
  await b.close();
  return { first, stale, other, idle, waiting, pulled, after };
}

async function pauseStartOneSocket() {
  // pause() then start() on a live replication: still one socket, one subscription;
  // none after pause and after cancel; a write is still announced.
  const tenant = `${prefix}-pause`;
  const a = await new Device(tenant).open();
  const b = await new Device(tenant).open();
  activeBySocket.clear();
  b.online();
  await b.state.awaitInitialReplication();
  await sleep(300);
  const live = { sockets: openSockets(), subscriptions: activeSubscriptions() };
  await b.state.pause();
  await sleep(300);
  const paused = { sockets: openSockets(), subscriptions: activeSubscriptions() };
  await b.state.start();
  await sleep(500);
  const restarted = { sockets: openSockets(), subscriptions: activeSubscriptions() };
  await a.people.insert({ id: "p", givenName: "Pat" });
  await a.sync();
  let arrived = false;
  for (let i = 0; i < 250 && !arrived; i++) {
    arrived = Boolean(await b.people.findOne("p").exec());
    if (!arrived) await sleep(20);
  }
  await a.close();
  await b.state.cancel();
  await sleep(300);
  const cancelled = { sockets: openSockets(), subscriptions: activeSubscriptions() };
  await b.close();
  return { live, paused, restarted, cancelled, arrived };
}

async function fieldLevelConflicts() {
  // Both devices edit occupation; A also edits givenName, B familyName. With the
  // field-level handler B keeps its familyName (the server did not change it) and
  // takes the server's occupation; RxDB's default handler drops B's familyName.
  const result = {};
  for (const [label, conflictHandler] of [["fieldLevel", fieldLevelConflictHandler], ["default", null]]) {
    const tenant = `${prefix}-merge-${label}`;
    const a = await new Device(tenant).open();
    const b = await new Device(tenant, { conflictHandler }).open();
    await a.people.insert({ id: "m", givenName: "Ann", familyName: "Lee", occupation: "nurse" });
    await a.sync();
    await b.sync();
    await a.offline();
    await b.offline();
    await a.edit("m", { givenName: "Anna", occupation: "doctor" });
    await b.edit("m", { familyName: "Lovelace", occupation: "mathematician" });
    await a.sync();
    await b.sync();
    await a.sync();
    result[label] = { server: (await serverPeople(tenant)).m, a: (await a.docs()).m, b: (await b.docs()).m };
    await a.close();
    await b.close();
  }
  return result;
}

async function resyncAcrossTheHorizon() {
  // Run against a server that keeps deletions 2 s (RETENTION_SECONDS=2).
  const tenant = `${prefix}-resync`;
  let resyncs = 0;
  const a = await new Device(tenant).open();
  const b = await new Device(tenant, { onResync: () => resyncs++ }).open();
  for (const id of ["x", "y", "z"]) await a.people.insert({ id, givenName: id });
  await a.sync();
  await b.sync();
  await b.offline();
  await a.remove("x");
  await a.edit("y", { familyName: "changed" });
  await a.sync();
  await b.edit("z", { occupation: "offline edit" });
  await b.people.insert({ id: "w", givenName: "created offline" });
  await sleep(3000); // b's token is now older than the retention period
  await b.sync();
  await a.sync();
  await b.sync();
  const errors = b.errors;
  return { ...(await converged(tenant, a, b)), resyncs, errors };
}

async function tenantDeleted() {
  // An owner deletes the tenant: the device stops replicating, is told, drops its copy.
  const tenant = `${prefix}-deleted`;
  let told = 0;
  const a = await new Device(tenant, { onTenantDeleted: () => told++ }).open();
  await a.people.insert({ id: "gone", givenName: "Ann" });
  await a.sync();
  for (;;) {
    const data = await gql(
      `mutation($t: ID!) { deleteTenant(tenantID: $t, confirm: $t) { done } }`,
      { t: tenant },
    );
    if (data.deleteTenant.done) break;
  }
  a.state.reSync();
  for (let i = 0; i < 50 && told === 0; i++) await sleep(100);
  const stopped = a.state.isStopped();
  await a.people.remove(); // what an app does when told: its copy and outbox go
  const errors = a.errors;
  await a.db.close();
  return { told, stopped, errors, server: await serverPeople(tenant) };
}

async function tenantDeletedOutbox() {
  // A device offline while an owner deletes its tenant, with a create queued: back
  // online, its push carries the old since and is refused; the app is told, and the
  // server holds nothing of the device's copy (the tenant is not written again).
  const tenant = `${prefix}-deleted-outbox`;
  let told = 0;
  const a = await new Device(tenant, { onTenantDeleted: () => told++ }).open();
  await a.people.insert({ id: "held", givenName: "Ann" });
  await a.sync();
  await a.offline();
  await a.people.insert({ id: "queued", givenName: "created offline" });
  for (;;) {
    const data = await gql(
      `mutation($t: ID!) { deleteTenant(tenantID: $t, confirm: $t) { done } }`,
      { t: tenant },
    );
    if (data.deleteTenant.done) break;
  }
  a.online();
  for (let i = 0; i < 100 && told === 0; i++) await sleep(100);
  const stopped = a.state.isStopped();
  const errors = a.errors;
  await a.people.remove();
  await a.db.close();
  return { told, stopped, errors, server: await serverPeople(tenant) };
}

// Tokens the test gives (env RX_TOKENS): `other` does not list the tenants of the
// membership scenarios, `reader` lists `<prefix>-role` as a reader.
const tokens = JSON.parse(process.env.RX_TOKENS ?? "{}");
const uploadsSchema = {
  version: 0,
  primaryKey: "sha256",
  type: "object",
  properties: { sha256: { type: "string", maxLength: 64 } },
  required: ["sha256"],
};

// A device holding x and y of `tenant` (synced), with a local collection of the
// tenant's own (`uploads`, as the README's photos), then offline with two edits
// queued (a create, an update); its requests counted, its token `bearer.now`.
async function memberDevice(tenant, told) {
  const bearer = { now: token, requests: 0 };
  const a = await new Device(tenant, {
    headers: async () => {
      bearer.requests++;
      return { Authorization: `Bearer ${bearer.now}` };
    },
    onRejected: (row, error) => told.rejected.push([row?.newDocumentState.id, error?.code, error?.reason ?? null]),
    onNotAMember: ({ refused, error }) => told.lost.push({ refused: refused.map((r) => r.newDocumentState.id).sort(), reason: error.reason ?? null, code: error.code }),
    tenantCollections: (db) => [db.uploads],
  }).open();
  await a.db.addCollections({ uploads: { schema: uploadsSchema } });
  await a.db.uploads.insert({ sha256: "ab".repeat(32) });
  await a.people.insert({ id: "x", givenName: "Ann" });
  await a.people.insert({ id: "y", givenName: "Bob" });
  await a.sync();
  await a.offline();
  await a.people.insert({ id: "queued", givenName: "created offline" });
  await a.edit("x", { familyName: "edited offline" });
  return { a, bearer };
}

// What a new replication of the same identifier on the collection added again
// pulls (with the owner's token): everything, if the checkpoint went with the copy.
async function pulledAgain(a) {
  if (a.people.closed) await a.db.addCollections({ people: { schema } });
  a.people = a.db.people;
  a.options = {};
  a.state = null;
  await a.sync();
  const docs = await a.docs();
  await a.close();
  return docs;
}

async function notAMember() {
  // The device's token no longer lists the tenant (the user was removed): its next
  // push is refused NOT_A_MEMBER, and it lets go of the tenant at once.
  const tenant = `${prefix}-member`;
  const told = { rejected: [], lost: [] };
  const { a, bearer } = await memberDevice(tenant, told);
  bearer.now = tokens.other;
  a.online();
  for (let i = 0; i < 100 && told.lost.length === 0; i++) await sleep(100);
  const stopped = a.state.isStopped();
  const removed = { people: a.people.closed, uploads: a.db.uploads?.closed ?? true };
  const requests = bearer.requests;
  await sleep(1000); // RxDB retries every 200 ms: none goes
  const after = bearer.requests - requests;
  bearer.now = token;
  return { told, stopped, removed, after, server: await serverPeople(tenant), again: await pulledAgain(a) };
}

// While `run` runs, the server cannot be reached over HTTP (fetch fails); answers
// how many requests were tried.
async function unreachable(run) {
  const real = globalThis.fetch;
  let tried = 0;
  globalThis.fetch = async () => {
    tried++;
    throw new TypeError("fetch failed");
  };
  try {
    await run(() => tried);
  } finally {
    globalThis.fetch = real;
  }
  return tried;
}

async function signOut() {
  // The app signs out while offline (its edits not pushed): the device lets go of
  // the tenant as on NOT_A_MEMBER, without a request; each queued edit SIGNED_OUT.
  const tenant = `${prefix}-signout`;
  const told = { rejected: [], lost: [] };
  const { a } = await memberDevice(tenant, told);
  let after = null;
  let removed = null;
  await unreachable(async (tried) => {
    a.online();
    await sleep(500); // started: its pushes fail, retried
    const before = tried();
    await forgetTenant(a.state);
    removed = { people: a.people.closed, uploads: a.db.uploads?.closed ?? true };
    await sleep(500);
    after = tried() - before;
  });
  return { told, removed, after, server: await serverPeople(tenant), again: await pulledAgain(a) };
}

async function roleRefusalKeepsAll() {
  // A reader's writes are refused for its role (FORBIDDEN, ROLE): those rows are
  // rejected (reverted to the server's state), and nothing else goes.
  const tenant = `${prefix}-role`;
  const told = { rejected: [], lost: [] };
  const { a, bearer } = await memberDevice(tenant, told);
  bearer.now = tokens.reader;
  await a.sync();
  await sleep(500);
  const result = {
    told,
    stopped: a.state.isStopped(),
    removed: { people: a.people.closed, uploads: a.db.uploads.closed },
    device: await a.docs(),
    uploads: (await a.db.uploads.find().exec()).length,
  };
  await a.close();
  return result;
}

async function unreachableKeepsAll() {
  // The server cannot be reached while the device comes back online: RxDB retries,
  // nothing goes; once it answers, the queued edits are pushed.
  const tenant = `${prefix}-unreachable`;
  const told = { rejected: [], lost: [] };
  const { a } = await memberDevice(tenant, told);
  let during = null;
  const tried = await unreachable(async () => {
    a.online();
    await sleep(1000);
    during = {
      stopped: a.state.isStopped(),
      removed: { people: a.people.closed, uploads: a.db.uploads.closed },
      device: await a.docs(),
      uploads: (await a.db.uploads.find().exec()).length,
    };
  });
  await a.sync();
  const result = { told, during, tried, server: await serverPeople(tenant) };
  await a.close();
  return result;
}

async function randomRun(seed) {
  const tenant = `${prefix}-random-${seed}`;
  let x = seed;
  const rand = () => ((x = (x * 1103515245 + 12345) % 2147483648) / 2147483648);
  const devices = [];
  for (let i = 0; i < 3; i++) devices.push(await new Device(tenant).open());
  for (const d of devices) d.online();
  let created = 0;
  for (let step = 0; step < 60; step++) {
    const d = devices[Math.floor(rand() * devices.length)];
    const r = rand();
    if (r < 0.1) {
      if (d.state) await d.offline();
      else d.online();
      continue;
    }
    const docs = await d.people.find().exec();
    if (r < 0.35 || docs.length === 0) {
      await d.people.insert({ id: `r${seed}-${created++}`, givenName: `g${step}` });
    } else if (r < 0.85) {
      const doc = docs[Math.floor(rand() * docs.length)];
      const field = ["givenName", "familyName", "occupation"][Math.floor(rand() * 3)];
      await doc.incrementalPatch({ [field]: `${field}-${step}` });
    } else {
      await docs[Math.floor(rand() * docs.length)].remove();
    }
    if (rand() < 0.3) await sleep(20);
  }
  for (let round = 0; round < 2; round++) for (const d of devices) await d.sync();
  const server = await serverPeople(tenant);
  const views = [];
  for (const d of devices) views.push(await d.docs());
  const errors = devices.flatMap((d) => d.errors);
  for (const d of devices) await d.close();
  return { equal: views.every((v) => same(v, server)), serverCount: Object.keys(server).length, errors };
}

async function photoAttachments() {
  // The README's example (example.mjs), as written: device A attaches a photo online
  // (upload, then patch), then another one offline (bytes kept locally, uploaded by
  // the replication on reconnect); B pulls the reference and downloads the same
  // bytes. A reference to bytes nobody uploaded is ATTACHMENT_MISSING: nothing
  // reaches the server and A's document goes back to the server's state.
  const tenant = `${prefix}-photo`;
  const api = { url, tenantID: tenant, headers: async () => auth };
  const offlineApi = { ...api, url: "http://127.0.0.1:9/graphql" }; // nothing listens
  const errors = [];
  const open = async () => {
    const name = `d${++deviceCount}`;
    const db = await createRxDatabase({ name, storage: getRxStorageMemory(), multiInstance: false });
    await addCollections(db);
    return db;
  };
  const replicate = (db) => {
    const options = { waitForLeadership: false, retryTime: 200, replicationIdentifier: `${db.name}-${tenant}` };
    const state = replicatePeople(db, api, options);
    state.error$.subscribe((e) => errors.push(e.parameters?.errors?.[0]?.code ?? e.code ?? String(e)));
    return state;
  };
  const sync = async (state) => {
    await state.awaitInitialReplication();
    state.reSync();
    await state.awaitInSync();
  };
  const pushedPhotos = []; // every reference a push sent (assumed and new states)
  const originalFetch = globalThis.fetch;
  globalThis.fetch = async (request, ...rest) => {
    if (request instanceof Request && request.url === url) {
      const body = JSON.parse(await request.clone().text());
      for (const m of body.variables?.i?.mutations ?? []) {
        for (const sent of [m.putPerson?.assumed, m.putPerson?.state]) {
          if (sent?.person?.photo) pushedPhotos.push(sent.person.photo);
        }
      }
    }
    return originalFetch(request, ...rest);
  };
  const png = (n) => new Blob([crypto.getRandomValues(new Uint8Array(n))], { type: "image/png" });
  const bytesOf = async (blob) => Buffer.from(await blob.arrayBuffer()).toString("base64");
  const notFound = (sha256) => attachmentURL(api, sha256).then(() => false, (e) => e.code === "NOT_FOUND");
  const serverPerson = async (id) => {
    const query = `query($t: ID!, $id: ID!) { person(tenantID: $t, id: $id) {
      givenName photo { sha256 size contentType } } }`;
    return (await gql(query, { t: tenant, id })).person;
  };

  const a = await open();
  const b = await open();
  let stateA = replicate(a);
  await a.people.insert({ id: "ann", givenName: "Ann" });
  await sync(stateA);
  const first = png(3000);
  await attachPhoto(a, api, await a.people.findOne("ann").exec(), first);
  await sync(stateA);
  const online = {
    server: await serverPerson("ann"),
    expected: await hashAttachment(first),
    uploads: (await a.uploads.find().exec()).length, // nothing kept: uploaded at once
  };

  await stateA.cancel(); // offline
  const second = png(5000);
  await attachPhoto(a, offlineApi, await a.people.findOne("ann").exec(), second);
  const offline = {
    local: (await a.people.findOne("ann").exec()).toJSON().photo,
    expected: await hashAttachment(second),
    notYetUploaded: await notFound((await hashAttachment(second)).sha256),
    kept: (await a.uploads.find().exec()).map((u) => u.sha256),
  };
  stateA = replicate(a); // back online: uploads, then pushes
  await sync(stateA);
  offline.server = await serverPerson("ann");

  const stateB = replicate(b);
  await sync(stateB);
  const annB = await b.people.findOne("ann").exec();
  const link = await photoURL(api, annB);
  const downloaded = await (await originalFetch(link)).blob();
  const pulled = { photo: annB.toJSON().photo, identical: (await bytesOf(downloaded)) === (await bytesOf(second)) };
  await annB.incrementalPatch({ givenName: "Anna" }); // the photo kept as it was: not checked again
  await sync(stateB);
  pulled.server = await serverPerson("ann");

  const ghostBytes = png(100);
  const ghost = await hashAttachment(ghostBytes); // not uploaded, no local bytes
  const before = errors.length;
  const refused = [];
  stateA.error$.subscribe((e) => refused.push(...(e.parameters?.pushRows ?? []).map((r) => r.newDocumentState)));
  await a.people.insert({ id: "ghost", givenName: "Ghost", photo: ghost });
  await sync(stateA);
  await sleep(300);
  await sync(stateA);
  const missing = {
    errors: errors.slice(before),
    server: await serverPerson("ghost"),
    device: (await a.people.findOne("ghost").exec())?.toJSON() ?? null,
    notFound: await notFound(ghost.sha256),
  };
  // The app finds the bytes after all: uploads them and saves the refused document again.
  await uploadAttachment({ ...api, blob: ghostBytes });
  const again = Object.fromEntries(Object.entries(refused[0]).filter(([k]) => !k.startsWith("_")));
  await a.people.insert(again);
  await sync(stateA);
  missing.resaved = { server: await serverPerson("ghost"), errors: errors.slice(before + missing.errors.length) };
  globalThis.fetch = originalFetch;
  await stateA.cancel();
  await stateB.cancel();
  await a.close();
  await b.close();
  return { online, offline, pulled, missing, pushedPhotos, errorsBefore: errors.slice(0, before) };
}

// Release 2 of the app (tests/apps/release2/, served by the report's server): the
// people collection's schema version 1 adds `nickname` (RxDB's migration).
const schemaV2 = release2Schemas.Person;

async function push(tenant, mutations, at = url) {
  const response = await fetch(at, {
    method: "POST",
    headers: { "content-type": "application/json", ...auth },
    body: JSON.stringify({
      query: `mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status } } }`,
      variables: { i: { tenantID: tenant, mutations } },
    }),
  });
  const body = await response.json();
  if (body.data?.pushChanges.results.some((r) => r.status !== "APPLIED") ?? true) throw new Error(JSON.stringify(body));
}

// A device of the app at `release` (1: schema version 0; 2: version 1, migrated in
// place from version 0's storage), replicating through `at` (live without a socket:
// RxDB's cancel() of a replication that is not live waits for its first sync, which
// never comes while every request is refused).
async function releaseDevice(name, release) {
  const db = await createRxDatabase({ name, storage: getRxStorageMemory(), multiInstance: false });
  const people = release === 1 ? { schema } : { schema: schemaV2, migrationStrategies: { 1: (doc) => doc } };
  await db.addCollections({ people });
  return db;
}
function replicateRelease(db, tenant, release, at = url) {
  const errors = [];
  const state = replicateSyncAPI({
    collection: db.people,
    url: at,
    tenantID: tenant,
    type: "PERSON",
    headers: auth,
    release,
    fieldReleases: { nickname: 2 }, // schemaV2's field of release 2
    live: true,
    wsUrl: false,
    waitForLeadership: false,
    retryTime: 100,
    replicationIdentifier: `release-${tenant}`, // the same whichever server answers
  });
  state.error$.subscribe((e) => {
    const error = e.parameters?.errors?.[0];
    errors.push({ code: error?.extensions?.code ?? error?.code ?? e.code, servedRelease: error?.extensions?.servedRelease ?? null });
  });
  return { state, errors };
}
// Replicates until RxDB reports an error (then cancelled), or until in sync.
async function replicateOnce(db, tenant, release, at = url) {
  const { state, errors } = replicateRelease(db, tenant, release, at);
  const failed = new Promise((resolve) => state.error$.subscribe(() => resolve("error")));
  await Promise.race([state.awaitInitialReplication().then(() => "done"), failed]);
  await state.cancel();
  return errors;
}
const nicknamed = async (db) => (await db.people.find().exec()).filter((d) => d.get("nickname")).length;

async function upgradeCatchesUp() {
  // 9 people written by a release 2 app (7 with a nickname); a release 1 device syncs
  // them (no nicknames: not in its schema), edits one offline; 2 more nicknames are
  // set; the app is updated to release 2 (the collection's schema version 1, migrated
  // over the same storage): its replication catches up on the nicknames set before
  // its last release 1 pull (RxDB kept that pull's checkpoint through the migration).
  const tenant = `${prefix}-upgrade`;
  const people = Array.from({ length: 9 }, (_, i) => ({
    createPerson: { tenantID: tenant, id: `p${i}`, person: { givenName: `P${i}`, ...(i < 7 ? { nickname: `nick${i}` } : {}) } },
  }));
  await push(tenant, people);
  const name = `upgrade-${prefix}`;
  const old = await releaseDevice(name, 1);
  const before = await replicateOnce(old, tenant, 1);
  const pulled = (await old.people.find().exec()).length;
  await (await old.people.findOne("p0").exec()).incrementalPatch({ occupation: "offline edit" });
  await old.close();
  const late = [];
  for (const id of ["p7", "p8"]) {
    const data = await gql(`query($t: ID!, $id: ID!) { person(tenantID: $t, id: $id) { changeToken } }`, { t: tenant, id });
    late.push({ updatePerson: { tenantID: tenant, id, changeToken: data.person.changeToken, changes: { nickname: `late ${id}` } } });
  }
  await push(tenant, late);
  const db = await releaseDevice(name, 2);
  const { state, errors } = replicateRelease(db, tenant, 2);
  await state.awaitInitialReplication();
  const caughtUp = state.caughtUp?.() ?? null;
  await state.cancel();
  const server = await gql(`query($t: ID!) { person(tenantID: $t, id: "p0") { occupation nickname } }`, { t: tenant });
  const result = { pulled, nicknames: await nicknamed(db), people: (await db.people.find().exec()).length, caughtUp, server: server.person, errors: [...before, ...errors] };
  await db.close();
  return result;
}

// The collection's schema version 1 adds `phoneNumber`, a field of the catalog's
// first release (the app's release stays 1): values written before come with the
// first pull after the migration: release 1's schema without `phoneNumber` at
// version 0, whole at version 1.
const schemaWithPhone = { ...schema, version: 1 };

async function firstReleaseFieldCatchesUp() {
  const tenant = `${prefix}-phone`;
  const people = Array.from({ length: 8 }, (_, i) => ({
    createPerson: { tenantID: tenant, id: `p${i}`, person: { givenName: `P${i}`, ...(i < 5 ? { phoneNumber: `+1 555 010${i}` } : {}) } },
  }));
  await push(tenant, people);
  const name = `phone-${prefix}`;
  const old = await createRxDatabase({ name, storage: getRxStorageMemory(), multiInstance: false });
  await old.addCollections({ people: { schema: schemaWithoutPhone } });
  const before = await replicateOnce(old, tenant, 1);
  const pulled = (await old.people.find().exec()).length;
  await old.close();
  const db = await createRxDatabase({ name, storage: getRxStorageMemory(), multiInstance: false });
  await db.addCollections({ people: { schema: schemaWithPhone, migrationStrategies: { 1: (doc) => doc } } });
  const { state, errors } = replicateRelease(db, tenant, 1);
  await state.awaitInitialReplication();
  const caughtUp = state.caughtUp?.() ?? null;
  await state.cancel();
  const docs = await db.people.find().exec();
  const result = { pulled, people: docs.length, phones: docs.filter((d) => d.get("phoneNumber")).length, caughtUp, errors: [...before, ...errors] };
  await db.close();
  return result;
}

async function rollbackDeletionsAtUpgrade() {
  // A release 2 app gave p1 and p2 a nickname; through a release 1 server (a
  // rollback) p1 is deleted, p2 edited then deleted, p3 edited. A release 1 device
  // pulled the deletions; updated to release 2, its catch-up brings p3's nickname and
  // neither deleted person back.
  const tenant = `${prefix}-undead`;
  const old1 = process.env.RX_RELEASE1_URL;
  await push(tenant, [1, 2, 3].map((i) => ({ createPerson: { tenantID: tenant, id: `p${i}`, person: { givenName: `P${i}`, nickname: `nick${i}` } } })));
  const name = `undead-${prefix}`;
  const old = await releaseDevice(name, 1);
  const before = await replicateOnce(old, tenant, 1);
  const tokenOf = async (id) => (await gql(`query($t: ID!, $id: ID!) { person(tenantID: $t, id: $id) { changeToken } }`, { t: tenant, id })).person.changeToken;
  await push(
    tenant,
    [
      { deletePerson: { tenantID: tenant, id: "p1", changeToken: await tokenOf("p1") } },
      { updatePerson: { tenantID: tenant, id: "p2", changeToken: await tokenOf("p2"), changes: { familyName: "L" } } },
      { updatePerson: { tenantID: tenant, id: "p3", changeToken: await tokenOf("p3"), changes: { familyName: "L" } } },
    ],
    old1,
  );
  await push(tenant, [{ deletePerson: { tenantID: tenant, id: "p2", changeToken: await tokenOf("p2") } }], old1);
  before.push(...(await replicateOnce(old, tenant, 1)));
  const held = (await old.people.find().exec()).map((d) => d.id).sort();
  await old.close();
  const db = await releaseDevice(name, 2);
  const { state, errors } = replicateRelease(db, tenant, 2);
  await state.awaitInitialReplication();
  const caughtUp = state.caughtUp?.() ?? null;
  await state.cancel();
  const docs = await db.people.find().exec();
  const result = { before: held, after: Object.fromEntries(docs.map((d) => [d.id, d.get("nickname") ?? null])), caughtUp, errors: [...before, ...errors] };
  await db.close();
  return result;
}

async function upgradeRequired() {
  // A server that retired release 1 (MIN_CLIENT_RELEASE=2): the release 1 app's
  // replication reports UPGRADE_REQUIRED on error$ and keeps its unpushed document;
  // the updated app (schema version 1, release 2) pushes it.
  const tenant = `${prefix}-retired`;
  const at = process.env.RX_MIN2_URL;
  const name = `retired-${prefix}`;
  const old = await releaseDevice(name, 1);
  await old.people.insert({ id: "q", givenName: "Queued" });
  const refused = await replicateOnce(old, tenant, 1, at);
  await old.close();
  const db = await releaseDevice(name, 2);
  const after = await replicateOnce(db, tenant, 2, at);
  await db.close();
  const server = await gql(`query($t: ID!) { person(tenantID: $t, id: "q") { givenName } }`, { t: tenant });
  return { refused: refused[0] ?? null, after, server: server.person };
}

async function rollingDeploy() {
  // Behind one address during a rolling deploy: the first request reaches a release
  // 1 server, which refuses the app's documents; asked again with release 1's, a
  // release 2 server answers, with a version holding a nickname they do not select.
  // Stored so, the checkpoint past it, the nickname never came.
  const tenant = `${prefix}-rolling`;
  await push(tenant, [{ createPerson: { tenantID: tenant, id: "f", person: { givenName: "Fay", nickname: "F" } } }]);
  const db = await releaseDevice(`rolling-${prefix}`, 2);
  const real = globalThis.fetch;
  let first = true;
  globalThis.fetch = (input, init) => {
    if (!first) return real(input, init);
    first = false;
    return real(new Request(process.env.RX_RELEASE1_URL, new Request(input, init)));
  };
  let errors;
  try {
    errors = await replicateOnce(db, tenant, 2);
  } finally {
    globalThis.fetch = real;
  }
  const f = await db.people.findOne("f").exec();
  await db.close();
  return { errors, nickname: f?.get("nickname") ?? null };
}

async function rollback() {
  // A release 2 app replicating through a release 1 server (a rollback), then through
  // a release 2 server again. During the rollback it asks with release 1's documents
  // (`fieldReleases`): what a release 1 app wrote there, and a nickname cleared
  // before it (a version that server renders whole), arrive; nothing after a
  // nickname set meanwhile (a version it cannot render whole: its page ends there)
  // does. Its edits of release 1 fields go (an offline one alone, then one in a batch
  // with edits of nicknames); its edits of nicknames (a nickname set, a new person
  // with one) wait, reported on error$ with the served release, and go, with the
  // rest of the changes, once a release 2 server answers.
  const tenant = `${prefix}-rollback`;
  const name = `rollback-${prefix}`;
  const old = process.env.RX_RELEASE1_URL;
  const person = (id, fields) => ({ createPerson: { tenantID: tenant, id, person: fields } });
  await push(tenant, [
    person("k", { givenName: "Known", nickname: "Kay" }),
    person("plain", { givenName: "Plain" }),
    person("cleared", { givenName: "Cleared", nickname: "Gone" }),
    person("late", { givenName: "Late" }),
  ]);
  const db = await releaseDevice(name, 2);
  await replicateOnce(db, tenant, 2);
  const local = async (id) => strip((await db.people.findOne(id).exec())?.toJSON() ?? null);
  const strip = (doc) => doc && Object.fromEntries(Object.entries(doc).filter(([k]) => !k.startsWith("_") && k !== "id"));
  const serverNow = async () => {
    const query = `query($t: ID!) { changes(tenantID: $t, limit: 1000) {
      items { ... on Person { id givenName familyName nickname } } } }`;
    const { items } = (await gql(query, { t: tenant })).changes;
    return Object.fromEntries(items.map(({ id, ...p }) => [id, Object.fromEntries(Object.entries(p).filter(([, v]) => v !== null))]));
  };
  const update = async (id, changes) => {
    const { person: at } = await gql(`query($t: ID!, $id: ID!) { person(tenantID: $t, id: $id) { changeToken } }`, { t: tenant, id });
    await push(tenant, [{ updatePerson: { tenantID: tenant, id, changeToken: at.changeToken, changes } }]);
  };
  // Offline: an edit of a release 1 field of a person with a nickname.
  await (await db.people.findOne("k").exec()).incrementalPatch({ familyName: "Edited" });
  // Meanwhile a release 2 app clears a nickname; then the rollback, where a release 1
  // app creates a person, a release 2 app (on a server of its own) sets a nickname,
  // and the release 1 app creates another.
  await update("cleared", { nickname: null });
  await push(tenant, [person("made", { givenName: "Made on release 1" })], old);
  await update("late", { nickname: "Late" });
  await push(tenant, [person("made2", { givenName: "Made after it" })], old);

  const { state, errors } = replicateRelease(db, tenant, 2, old);
  await Promise.race([state.awaitInSync(), sleep(5000)]); // a module that cannot: never
  const pulled = { made: await local("made"), cleared: await local("cleared"), late: await local("late"), made2: await local("made2") };
  const pushed = { k: await local("k"), server: (await serverNow()).k, errors: [...errors] };
  // Still through the release 1 server: an edit of a release 1 field, then of nicknames.
  await (await db.people.findOne("cleared").exec()).incrementalPatch({ familyName: "Edited too" });
  await (await db.people.findOne("plain").exec()).incrementalPatch({ nickname: "Plainy" });
  await db.people.insert({ id: "r", givenName: "Rolled", nickname: "Rolly" });
  const done = async () => errors.length > 0 && (await serverNow()).cleared?.familyName === "Edited too";
  for (let waited = 0; waited < 5000 && !(await done()); waited += 100) await sleep(100);
  await state.cancel();
  const held = { refused: errors[0] ?? null, server: await serverNow() };
  const after = await replicateOnce(db, tenant, 2);
  const device = Object.fromEntries((await db.people.find().exec()).map((d) => [d.primary, strip(d.toJSON())]));
  await db.close();
  return { pulled, pushed, held, after, server: await serverNow(), device };
}

// Scenarios that need a server of their own settings run only when named (any
// scenario can be named: `node test/scenarios.mjs <url> <token> <prefix> a,b`).
const named = { resyncAcrossTheHorizon };
const only = process.argv[5]?.split(",");
const everyday = {
  bulkPull,
  twoDevicesConverge,
  concurrentFieldEdits,
  twoEditsInARow,
  pullOverlappingPush,
  deleteVersusEdit,
  subsetDeletion,
  lostPushResponse,
  pokeDrivesPull,
  silentPush,
  pauseStartOneSocket,
  fieldLevelConflicts,
  rejectedRow,
  tenantDeleted,
  tenantDeletedOutbox,
  notAMember,
  signOut,
  roleRefusalKeepsAll,
  unreachableKeepsAll,
  photoAttachments,
  random1: () => randomRun(1),
  random2: () => randomRun(2),
  upgradeCatchesUp,
  firstReleaseFieldCatchesUp,
  rollbackDeletionsAtUpgrade,
  upgradeRequired,
  rollback,
  rollingDeploy,
};
const chosen = only ? Object.fromEntries(only.map((n) => [n, { ...everyday, ...named }[n]])) : everyday;
const report = {};
for (const [name, run] of Object.entries(chosen)) {
  try {
    // A scenario that hangs (RxDB retrying forever) fails alone, with its name.
    const timeout = new Promise((_, reject) =>
      setTimeout(() => reject(new Error(`${name} did not finish in 60 s`)), 60000),
    );
    report[name] = await Promise.race([run(), timeout]);
  } catch (error) {
    report[name] = { failed: String(error?.stack ?? error) };
  }
}
console.log(JSON.stringify(report));
process.exit(0);

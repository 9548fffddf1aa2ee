// A record that leaves a member's view (contract 3.12, a LeftViewItem) leaves Bob's
// RxDB device (memory storage, its default conflict handler, no internals touched),
// replicating with replicateSyncAPI as an app of the family app's release 3. Ann
// shares a letter with Bob, then unshares it between two pages of his first pull, or
// between two syncs with an edit of his queued offline. Usage:
//   node left_view.mjs <graphql url> <ann's token> <bob's token> <tenant prefix>
// Prints one JSON line: each scenario's findings, for tests/ecosystem/test_rxdb_left_view.py.
import { createRxDatabase } from "rxdb";
import { getRxStorageMemory } from "rxdb/plugins/storage-memory";
import { replicateSyncAPI } from "../index.js";

const [url, annToken, bobToken, prefix] = process.argv.slice(2);
const RELEASE = 3;
const schema = {
  version: 0,
  primaryKey: "id",
  type: "object",
  properties: { id: { type: "string", maxLength: 64 }, givenName: { type: "string" }, familyName: { type: "string" } },
  required: ["id"],
};
let devices = 0;

async function asAnn(query, variables) {
  const response = await realFetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", Authorization: `Bearer ${annToken}`, "X-Sync-Release": String(RELEASE) },
    body: JSON.stringify({ query, variables }),
  });
  const body = await response.json();
  if (body.errors) throw new Error(JSON.stringify(body.errors));
  return body.data;
}

// Between two pages: `beforePage` runs once, before the first `changes` request that
// sends a cursor (the second page of a pull), whoever makes it.
const realFetch = globalThis.fetch;
let beforePage = null;
let pages = 0;
globalThis.fetch = async (input, init) => {
  if (input instanceof Request && beforePage) {
    const body = await input.clone().text();
    if (body.includes("changes(") && JSON.parse(body).variables?.cursor) {
      const run = beforePage;
      beforePage = null;
      await run();
    }
  }
  if (!(input instanceof Request) || !(await input.clone().text()).includes("changes(")) {
    return realFetch(input, init);
  }
  pages++;
  const response = await realFetch(input, init);
  const body = await response.clone().json();
  pulled.push((body.data?.changes?.items ?? []).map((i) => `${i.__typename}:${i.id}`));
  return response;
};
const pulled = []; // each page's items, as __typename:id

async function letterAndThree(tenant) {
  const create = `mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id changeToken } } }`;
  const i = { tenantID: tenant, id: "letter", person: { givenName: "Letter" }, visibility: { sharedWith: ["bob"] } };
  await asAnn(create, { i });
  for (const name of ["cy", "di", "ed"]) {
    await asAnn(create, { i: { tenantID: tenant, id: name, person: { givenName: name } } });
  }
}

async function unshare(tenant, id = "letter") {
  const { person } = await asAnn(`query($t: ID!, $id: ID!) { person(tenantID: $t, id: $id) { changeToken } }`, {
    t: tenant,
    id,
  });
  const i = { tenantID: tenant, id, changeToken: person.changeToken, visibility: { owner: "ann", sharedWith: [] } };
  await asAnn(`mutation($i: SetVisibilityInput!) { setVisibility(input: $i) { item { id } } }`, { i });
}

async function annsLetter(tenant) {
  const { person } = await asAnn(`query($t: ID!) { person(tenantID: $t, id: "letter") { givenName familyName } }`, { t: tenant });
  return person;
}

class Bob {
  constructor(tenant) {
    this.tenant = tenant;
    this.name = `bob${++devices}`;
    this.rejected = [];
    this.errors = [];
  }
  async open() {
    this.db = await createRxDatabase({ name: this.name, storage: getRxStorageMemory(), multiInstance: false });
    await this.db.addCollections({ people: { schema } });
    this.people = this.db.people;
    return this;
  }
  online() {
    this.state = replicateSyncAPI({
      collection: this.people,
      url,
      tenantID: this.tenant,
      type: "PERSON",
      release: RELEASE,
      headers: async () => ({ Authorization: `Bearer ${bobToken}` }),
      wsUrl: false,
      batchSize: 2,
      waitForLeadership: false,
      retryTime: 200,
      replicationIdentifier: `${this.name}-${this.tenant}`,
      onRejected: (row, error) => this.rejected.push([row?.newDocumentState.id, error?.code ?? null]),
    });
    this.state.error$.subscribe((e) => this.errors.push(e.parameters?.errors?.[0]?.code ?? e.code ?? String(e)));
    return this.state;
  }
  async sync() {
    if (!this.state) this.online();
    await this.state.awaitInitialReplication();
    this.state.reSync();
    await this.state.awaitInSync();
  }
  async offline() {
    await this.state?.cancel();
    this.state = null;
  }
  async docs() {
    const all = await this.people.find().exec();
    return Object.fromEntries(all.map((d) => [d.id, d.toJSON().givenName ?? null]));
  }
  async close() {
    await this.offline();
    await this.db.close();
  }
}

async function betweenPages() {
  const tenant = `${prefix}-pages`;
  await letterAndThree(tenant);
  const bob = await new Bob(tenant).open();
  let unsharedAfter = null;
  beforePage = async () => {
    unsharedAfter = pages;
    await unshare(tenant);
  };
  bob.online();
  await bob.state.awaitInitialReplication();
  const afterFirst = await bob.docs();
  bob.state.reSync();
  await bob.state.awaitInSync();
  await bob.sync();
  const result = {
    unsharedAfter,
    pages: pulled.splice(0),
    afterFirst,
    docs: await bob.docs(),
    errors: bob.errors,
    ann: await annsLetter(tenant),
  };
  await bob.close();
  return result;
}

async function queuedEdit() {
  const tenant = `${prefix}-queued`;
  await letterAndThree(tenant);
  // A memo shared with him too, which he does not edit.
  const memo = { tenantID: tenant, id: "memo", person: { givenName: "Memo" }, visibility: { sharedWith: ["bob"] } };
  await asAnn(`mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id } } }`, { i: memo });
  const bob = await new Bob(tenant).open();
  await bob.sync();
  const before = await bob.docs();
  await bob.offline();
  const letter = await bob.people.findOne("letter").exec();
  await letter.incrementalPatch({ familyName: "Bob's" }); // offline
  await unshare(tenant);
  await unshare(tenant, "memo");
  await bob.sync();
  await bob.sync();
  const result = {
    before,
    docs: await bob.docs(),
    rejected: bob.rejected,
    ann: await annsLetter(tenant),
  };
  await bob.close();
  return result;
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

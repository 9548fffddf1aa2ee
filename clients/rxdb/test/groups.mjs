// Bob's RxDB devices follow his groups and role (contract 3.12 "Groups", 6 "Groups",
// "Removing and re-adding a member"): memory storage, the default conflict handler,
// replicateSyncAPI as an app of the family app's release 4, in a tenant whose members
// are data (olga OWNER, bob and carol WRITER in group `kids`). Olga shares a letter
// with kids. Bob leaves kids with an edit of the letter queued offline (and a memo shared
// with kids unedited); Bob, in no
// group, joins kids with one device online and one offline; Bob removed (REMOVED)
// with an edit queued; Bob demoted to READER with an edit queued. Usage:
//   node groups.mjs <graphql url> <olga's token> <bob's token> <carol's token> <tenant prefix>
// Prints one JSON line: each scenario's findings, for tests/ecosystem/test_rxdb_groups.py.
import { createRxDatabase } from "rxdb";
import { getRxStorageMemory } from "rxdb/plugins/storage-memory";
import { replicateSyncAPI } from "../index.js";

const [url, olgaToken, bobToken, carolToken, prefix] = process.argv.slice(2);
const RELEASE = 4; // the family app's groupsSince
const schema = {
  version: 0,
  primaryKey: "id",
  type: "object",
  properties: { id: { type: "string", maxLength: 64 }, givenName: { type: "string" }, familyName: { type: "string" } },
  required: ["id"],
};
let devices = 0;

async function asOlga(query, variables) {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", Authorization: `Bearer ${olgaToken}`, "X-Sync-Release": String(RELEASE) },
    body: JSON.stringify({ query, variables }),
  });
  const body = await response.json();
  if (body.errors) throw new Error(JSON.stringify(body.errors));
  return body.data;
}

const createMember = `mutation($i: CreateMemberInput!) { createMember(input: $i) { member { id } } }`;
const createPerson = `mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id } } }`;

// olga (the move: her own OWNER record first), bob in `bobsGroups`, carol in kids; the
// letter shared with kids only; cy, di, ed seen by the whole tenant.
async function family(tenant, bobsGroups) {
  for (const [id, role, groups] of [["olga", "OWNER", []], ["bob", "WRITER", bobsGroups], ["carol", "WRITER", ["kids"]]]) {
    await asOlga(createMember, { i: { tenantID: tenant, id, member: { role, groups } } });
  }
  const letter = { tenantID: tenant, id: "letter", person: { givenName: "Letter" }, visibility: { sharedWith: [], groups: ["kids"] } };
  await asOlga(createPerson, { i: letter });
  for (const name of ["cy", "di", "ed"]) {
    await asOlga(createPerson, { i: { tenantID: tenant, id: name, person: { givenName: name } } });
  }
}

async function setBob(tenant, changes) {
  const { member } = await asOlga(`query($t: ID!) { member(tenantID: $t, id: "bob") { changeToken } }`, { t: tenant });
  const i = { tenantID: tenant, id: "bob", changeToken: member.changeToken, changes };
  await asOlga(`mutation($i: UpdateMemberInput!) { updateMember(input: $i) { member { id } } }`, { i });
}

async function olgasLetter(tenant) {
  const { person } = await asOlga(`query($t: ID!) { person(tenantID: $t, id: "letter") { givenName familyName } }`, { t: tenant });
  return person;
}

async function until(check, what) {
  const deadline = Date.now() + 20000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

class Device {
  constructor(tenant, token) {
    this.tenant = tenant;
    this.token = token;
    this.name = `dev${++devices}`;
    this.rejected = [];
    this.notAMember = null;
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
      headers: async () => ({ Authorization: `Bearer ${this.token}` }),
      wsUrl: false,
      batchSize: 2,
      waitForLeadership: false,
      retryTime: 200,
      replicationIdentifier: `${this.name}-${this.tenant}`,
      onRejected: (row, error) => this.rejected.push([row?.newDocumentState.id, error?.code ?? null, error?.reason ?? null]),
      onNotAMember: ({ refused, error }) => {
        this.notAMember = { refused: refused?.length ?? null, code: error?.code, reason: error?.reason };
      },
    });
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
  async edit(id) {
    const doc = await this.people.findOne(id).exec();
    await doc.incrementalPatch({ familyName: "Bob's" });
  }
  async docs() {
    const all = await this.people.find().exec();
    return Object.fromEntries(all.map((d) => [d.id, d.toJSON().givenName ?? null]));
  }
  async close() {
    if (!this.people.closed) await this.offline();
    await this.db.close();
  }
}

async function leaveQueued() {
  const tenant = `${prefix}-leave`;
  await family(tenant, ["kids"]);
  // A memo shared with kids too, which he does not edit: only a LeftViewItem takes it.
  const memo = { tenantID: tenant, id: "memo", person: { givenName: "Memo" }, visibility: { sharedWith: [], groups: ["kids"] } };
  await asOlga(createPerson, { i: memo });
  const bob = await new Device(tenant, bobToken).open();
  const carol = await new Device(tenant, carolToken).open();
  await bob.sync();
  await carol.sync();
  const before = await bob.docs();
  await bob.offline();
  await bob.edit("letter"); // offline
  await setBob(tenant, { groups: [] });
  await bob.sync();
  await bob.sync();
  await carol.sync();
  const result = { before, docs: await bob.docs(), rejected: bob.rejected, carol: await carol.docs(), olga: await olgasLetter(tenant) };
  await bob.close();
  await carol.close();
  return result;
}

async function joinTwoDevices() {
  const tenant = `${prefix}-join`;
  await family(tenant, []);
  const phone = await new Device(tenant, bobToken).open();
  const tablet = await new Device(tenant, bobToken).open();
  await phone.sync();
  await tablet.sync();
  const before = [await phone.docs(), await tablet.docs()];
  await tablet.offline(); // offline across the join
  await setBob(tenant, { groups: ["kids"] });
  await phone.sync();
  await tablet.sync();
  const fresh = await new Device(tenant, bobToken).open();
  await fresh.sync();
  const result = { before, phone: await phone.docs(), tablet: await tablet.docs(), fresh: await fresh.docs() };
  for (const d of [phone, tablet, fresh]) await d.close();
  return result;
}

async function removedQueued() {
  const tenant = `${prefix}-removed`;
  await family(tenant, ["kids"]);
  const bob = await new Device(tenant, bobToken).open();
  await bob.sync();
  await bob.offline();
  await bob.edit("letter"); // offline
  await setBob(tenant, { role: "REMOVED" });
  bob.online();
  await until(() => bob.notAMember !== null, "onNotAMember");
  await until(() => bob.people.closed, "the collection removed");
  const result = { notAMember: bob.notAMember, rejected: bob.rejected, removed: bob.people.closed, olga: await olgasLetter(tenant) };
  await bob.db.close();
  return result;
}

async function demotedQueued() {
  const tenant = `${prefix}-demoted`;
  await family(tenant, ["kids"]);
  const bob = await new Device(tenant, bobToken).open();
  await bob.sync();
  const before = await bob.docs();
  await bob.offline();
  await bob.edit("letter"); // offline
  await setBob(tenant, { role: "READER" });
  bob.online();
  await until(() => bob.rejected.length > 0, "the edit answered");
  await bob.sync();
  const result = { before, docs: await bob.docs(), rejected: bob.rejected, notAMember: bob.notAMember, olga: await olgasLetter(tenant) };
  await bob.close();
  return result;
}

const findings = {};
for (const [name, scenario] of Object.entries({ leaveQueued, joinTwoDevices, removedQueued, demotedQueued })) {
  try {
    findings[name] = await scenario();
  } catch (e) {
    findings[name] = { failed: String(e?.stack ?? e) };
  }
}
console.log(JSON.stringify(findings));
process.exit(0);

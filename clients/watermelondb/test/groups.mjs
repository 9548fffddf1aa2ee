// Bob's WatermelonDB devices (unmodified, from npm, LokiJS in memory) follow his groups
// and role (contract 3.12 "Groups", 6 "Groups", "Removing and re-adding a member"),
// syncing with createSyncAPI as an app of the family app's release 4, in a tenant
// whose members are data (olga OWNER, bob and carol WRITER in group `kids`). Olga
// shares a letter and a memo with kids. Bob leaves kids with an edit of the letter
// unsynced; Bob, in no group, joins kids with one device syncing and one offline;
// Bob removed (REMOVED) with an edit unsynced; Bob demoted to READER with one. Usage:
//   node test/groups.mjs <graphql url> <olga's token> <bob's token> <carol's token> <tenant prefix>
// Prints one JSON line: each scenario's findings, for
// tests/ecosystem/test_watermelondb_groups.py.
import { Database, Model, appSchema, tableSchema } from "@nozbe/watermelondb";
import LokiModule from "@nozbe/watermelondb/adapters/lokijs/index.js";
import { hasUnsyncedChanges } from "@nozbe/watermelondb/sync/index.js";
import loggerModule from "@nozbe/watermelondb/utils/common/logger/index.js";
import { createSyncAPI, syncColumns } from "../index.js";

const LokiJSAdapter = LokiModule.default ?? LokiModule;
(loggerModule.default ?? loggerModule).silence();
const [url, olgaToken, bobToken, carolToken, prefix] = process.argv.slice(2);
const RELEASE = 4; // the family app's groupsSince
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
// letter and the memo shared with kids only; cy, di, ed seen by the whole tenant.
async function family(tenant, bobsGroups) {
  for (const [id, role, groups] of [["olga", "OWNER", []], ["bob", "WRITER", bobsGroups], ["carol", "WRITER", ["kids"]]]) {
    await asOlga(createMember, { i: { tenantID: tenant, id, member: { role, groups } } });
  }
  for (const [id, givenName] of [["letter", "Letter"], ["memo", "Memo"]]) {
    const i = { tenantID: tenant, id, person: { givenName }, visibility: { sharedWith: [], groups: ["kids"] } };
    await asOlga(createPerson, { i });
  }
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
  const { person } = await asOlga(`query($t: ID!) { person(tenantID: $t, id: "letter") { givenName familyName } }`, {
    t: tenant,
  });
  return person;
}

class Device {
  constructor(tenant, token) {
    this.name = `dev${++devices}`;
    this.rejected = [];
    this.notAMember = null;
    const adapter = new LokiJSAdapter({ schema, useWebWorker: false, useIncrementalIndexedDB: false, dbName: this.name });
    this.database = new Database({ adapter, modelClasses: [Person] });
    this.people = this.database.get("people");
    this.api = createSyncAPI({
      database: this.database,
      url,
      tenantID: tenant,
      getToken: async () => token,
      tables: { people: { type: "PERSON", columns: FIELDS } },
      release: RELEASE,
      visibilitySince: 3,
      limit: 2,
      onRejected: (r) => this.rejected.push([r.id, r.code, r.reason ?? null]),
      onNotAMember: ({ refused, error }) => {
        this.notAMember = { refused: refused?.length ?? null, code: error?.code, reason: error?.reason };
      },
    });
  }
  async edit(id) {
    const record = await this.people.find(id);
    await this.database.write(() => record.update((r) => r._setRaw("family_name", "Bob's"))); // not synced yet
  }
  async docs() {
    const all = await this.people.query().fetch();
    return Object.fromEntries(all.map((r) => [r.id, r._raw.given_name ?? null]));
  }
}

async function leaveUnsynced() {
  const tenant = `${prefix}-leave`;
  await family(tenant, ["kids"]);
  const bob = new Device(tenant, bobToken);
  const carol = new Device(tenant, carolToken);
  await bob.api.sync();
  await carol.api.sync();
  const before = await bob.docs();
  await bob.edit("letter");
  await setBob(tenant, { groups: [] });
  await bob.api.sync();
  await bob.api.sync();
  await carol.api.sync();
  return {
    before,
    docs: await bob.docs(),
    rejected: bob.rejected,
    unsynced: await hasUnsyncedChanges({ database: bob.database }),
    carol: await carol.docs(),
    olga: await olgasLetter(tenant),
  };
}

async function joinTwoDevices() {
  const tenant = `${prefix}-join`;
  await family(tenant, []);
  const phone = new Device(tenant, bobToken);
  const tablet = new Device(tenant, bobToken);
  await phone.api.sync();
  await tablet.api.sync(); // then offline across the join
  const before = [await phone.docs(), await tablet.docs()];
  await setBob(tenant, { groups: ["kids"] });
  await phone.api.sync();
  await tablet.api.sync();
  const fresh = new Device(tenant, bobToken);
  await fresh.api.sync();
  return { before, phone: await phone.docs(), tablet: await tablet.docs(), fresh: await fresh.docs() };
}

async function removedUnsynced() {
  const tenant = `${prefix}-removed`;
  await family(tenant, ["kids"]);
  const bob = new Device(tenant, bobToken);
  await bob.api.sync();
  await bob.edit("letter");
  await setBob(tenant, { role: "REMOVED" });
  let thrown = null;
  try {
    await bob.api.sync();
  } catch (e) {
    thrown = { code: e?.code ?? null, reason: e?.reason ?? null };
  }
  return {
    thrown,
    notAMember: bob.notAMember,
    rejected: bob.rejected,
    docs: await bob.docs(),
    olga: await olgasLetter(tenant),
  };
}

async function demotedUnsynced() {
  const tenant = `${prefix}-demoted`;
  await family(tenant, ["kids"]);
  const bob = new Device(tenant, bobToken);
  await bob.api.sync();
  const before = await bob.docs();
  await bob.edit("letter");
  await setBob(tenant, { role: "READER" });
  await bob.api.sync();
  await bob.api.sync(); // the refused edit reverted by the next pull
  const letter = await bob.people.find("letter");
  return {
    before,
    docs: await bob.docs(),
    familyName: letter._raw.family_name ?? null,
    rejected: bob.rejected,
    notAMember: bob.notAMember,
    olga: await olgasLetter(tenant),
  };
}

const findings = {};
for (const [name, scenario] of Object.entries({ leaveUnsynced, joinTwoDevices, removedUnsynced, demotedUnsynced })) {
  try {
    findings[name] = await scenario();
  } catch (e) {
    findings[name] = { failed: String(e?.stack ?? e) };
  }
}
console.log(JSON.stringify(findings));
process.exit(0);

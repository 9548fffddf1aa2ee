// The RxDB collection schemas scripts/generate-clients writes, used as an app uses
// them with RxDB (unmodified, from npm, memory storage): two devices of a shipped
// app (family: people and reminders; tasks: projects and tasks, every field kind),
// each a collection per type from the app's generated schemas, replicate through the
// API, one edits what the other wrote, and both end equal. Usage:
//   node test/generated.mjs <graphql url> <bearer token> <tenant> <release> <app>
// Prints one JSON line of findings for tests/ecosystem/test_generated_clients.py.
import { readFileSync } from "node:fs";
import { addRxPlugin, createRxDatabase } from "rxdb";
import { RxDBMigrationSchemaPlugin } from "rxdb/plugins/migration-schema";
import { getRxStorageMemory } from "rxdb/plugins/storage-memory";
import { replicateSyncAPI } from "../index.js";

const [url, token, tenant, release, app] = process.argv.slice(2);
const schemas = JSON.parse(readFileSync(new URL(`./generated/${app}.json`, import.meta.url)));
const APPS = {
  family: {
    types: { people: ["Person", "PERSON"], reminders: ["Reminder", "REMINDER"] },
    write: async (db) => {
      await db.people.insert({ id: "ann", givenName: "Ann", relationship: "PARTNER", profileColor: "#112233" });
      await db.reminders.insert({ id: "milk", title: "milk", personID: "ann", completed: true, dueAt: "2026-12-01T08:00:00.000Z" });
    },
    edit: (db) => db.people.findOne("ann").exec().then((p) => p.incrementalPatch({ occupation: "pilot" })),
  },
  tasks: {
    types: { projects: ["Project", "PROJECT"], tasks: ["Task", "TASK"] },
    write: async (db) => {
      await db.projects.insert({ id: "house", name: "House", budgetCents: 120000, hoursPerWeek: 2.5, memberIDs: ["u1", "u2"], status: "DOING" });
      await db.tasks.insert({
        id: "fence",
        title: "paint the fence",
        priority: 3,
        score: 0.1,
        tags: ["home", "Zoë"],
        counts: [0, 2147483647],
        flags: [true, false],
        days: ["2024-02-29"],
        stages: ["TODO", "DONE"],
        address: { city: "Paris", floor: -5, latitude: 48.8, doorCodes: ["12A"] },
        checklist: [{ text: "buy paint", done: false }, { text: "brush" }],
        projectID: "house", // a Ref (release 2): the project's id
      });
    },
    edit: (db) =>
      db.tasks.findOne("fence").exec().then((t) => t.incrementalPatch({ address: { city: "Lyon" }, checklist: [], priority: 5 })),
  },
};
const TYPES = APPS[app].types;
// A generated schema's version counts the releases that added a field to its type:
// an identity strategy each (the fields a release adds are optional; docs/clients.md).
addRxPlugin(RxDBMigrationSchemaPlugin);
const identity = (schema) =>
  Object.fromEntries(Array.from({ length: schema.version }, (_, i) => [i + 1, (doc) => doc]));

async function device(name) {
  const db = await createRxDatabase({ name: `${name}-${tenant}`, storage: getRxStorageMemory() });
  await db.addCollections(
    Object.fromEntries(
      Object.entries(TYPES).map(([c, [typeName]]) => [c, { schema: schemas[typeName], migrationStrategies: identity(schemas[typeName]) }]),
    ),
  );
  const errors = [];
  const states = Object.entries(TYPES).map(([c, [typeName, type]]) => {
    const state = replicateSyncAPI({
      collection: db[c],
      url,
      tenantID: tenant,
      type,
      typeName,
      headers: { Authorization: `Bearer ${token}` },
      release: Number(release),
      live: true,
      wsUrl: false,
      waitForLeadership: false,
      retryTime: 200,
      replicationIdentifier: `${name}-${c}-${tenant}`,
    });
    state.error$.subscribe((e) => errors.push(e.parameters?.errors?.[0]?.code ?? e.code ?? String(e)));
    return state;
  });
  return { db, states, errors };
}

async function sync(d) {
  for (const state of d.states) {
    await state.awaitInitialReplication();
    state.reSync();
    await state.awaitInSync();
  }
}

const collections = Object.keys(TYPES);
const docs = async (d, c) =>
  Object.fromEntries(
    (await d.db[c].find().exec()).map((doc) => {
      const { _meta, _rev, _attachments, _deleted, ...rest } = doc.toJSON(true);
      return [doc.id, rest];
    }),
  );

const phone = await device("phone");
const tablet = await device("tablet");
await APPS[app].write(phone.db);
await sync(phone);
await sync(tablet);
await APPS[app].edit(tablet.db);
await sync(tablet);
await sync(phone);
const all = async (d) => Object.fromEntries(await Promise.all(collections.map(async (c) => [c, await docs(d, c)])));
const findings = { phone: await all(phone), tablet: await all(tablet), errors: [...phone.errors, ...tablet.errors] };
for (const d of [phone, tablet]) {
  for (const state of d.states) await state.cancel();
  await d.db.close();
}
console.log(JSON.stringify(findings));
process.exit(0);

// The RxDB collection schemas scripts/generate-clients writes, used as an app uses
// them with RxDB (unmodified, from npm, memory storage): two devices of the family
// app, each a collection per type from the generated schemas, replicate through the
// API; what one writes, the other reads. Usage:
//   node test/generated.mjs <graphql url> <bearer token> <tenant> <release>
// Prints one JSON line of findings for tests/ecosystem/test_generated_clients.py.
import { readFileSync } from "node:fs";
import { createRxDatabase } from "rxdb";
import { getRxStorageMemory } from "rxdb/plugins/storage-memory";
import { replicateSyncAPI } from "../index.js";

const schemas = JSON.parse(readFileSync(new URL("./generated/schemas.json", import.meta.url)));
const [url, token, tenant, release] = process.argv.slice(2);
const TYPES = { people: ["Person", "PERSON"], reminders: ["Reminder", "REMINDER"] };

async function device(name) {
  const db = await createRxDatabase({ name: `${name}-${tenant}`, storage: getRxStorageMemory() });
  await db.addCollections(
    Object.fromEntries(Object.entries(TYPES).map(([c, [typeName]]) => [c, { schema: schemas[typeName] }])),
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

const docs = async (d, c) =>
  Object.fromEntries(
    (await d.db[c].find().exec()).map((doc) => {
      const { _meta, _rev, _attachments, _deleted, ...rest } = doc.toJSON(true);
      return [doc.id, rest];
    }),
  );

const phone = await device("phone");
const tablet = await device("tablet");
await phone.db.people.insert({ id: "ann", givenName: "Ann", relationship: "PARTNER", profileColor: "#112233" });
await phone.db.reminders.insert({ id: "milk", title: "milk", personID: "ann", completed: true, dueAt: "2026-12-01T08:00:00.000Z" });
await sync(phone);
await sync(tablet);
await tablet.db.people.findOne("ann").exec().then((p) => p.incrementalPatch({ occupation: "pilot" }));
await sync(tablet);
await sync(phone);
const findings = {
  phone: { people: await docs(phone, "people"), reminders: await docs(phone, "reminders") },
  tablet: { people: await docs(tablet, "people"), reminders: await docs(tablet, "reminders") },
  errors: [...phone.errors, ...tablet.errors],
};
for (const d of [phone, tablet]) {
  for (const state of d.states) await state.cancel();
  await d.db.close();
}
console.log(JSON.stringify(findings));
process.exit(0);

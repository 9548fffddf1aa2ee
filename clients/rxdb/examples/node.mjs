// A device in Node, whole (clients/rxdb/README.md shows it): an RxDB database in
// memory, its people replicated through the API with example.mjs's replicatePeople,
// a person saved, synced, and the copy printed. From clients/rxdb after `npm ci`
// (Node 22+), with the API up:
//   node examples/node.mjs http://127.0.0.1:8000/graphql family1 "$(../../scripts/token --sub me --tenant family1)"
import { createRxDatabase } from "rxdb";
import { getRxStorageMemory } from "rxdb/plugins/storage-memory";
import { addCollections, replicatePeople } from "../example.mjs";

const [url, tenantID, token] = process.argv.slice(2);
const api = { url, tenantID, headers: { Authorization: `Bearer ${token}` } };

const db = await createRxDatabase({ name: "device", storage: getRxStorageMemory() });
await addCollections(db);
const replication = replicatePeople(db, api);
replication.error$.subscribe((error) => console.error("sync:", error.code ?? error.message));
await replication.awaitInitialReplication(); // the tenant's people, pulled

// Saved locally at once; the replication pushes it (offline: when the API is back).
const ann = await db.people.upsert({ id: "ann", givenName: "Ann" });
await ann.incrementalPatch({ familyName: "Lee" });
await replication.awaitInSync();

for (const person of await db.people.find({ sort: [{ id: "asc" }] }).exec()) {
  console.log(person.id, person.givenName ?? "", person.familyName ?? "");
}
await replication.cancel();
await db.close();

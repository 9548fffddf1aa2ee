import { IDBKeyRange, indexedDB } from "fake-indexeddb";
import { createRxDatabase } from "rxdb";
import { getRxStorageDexie } from "rxdb/plugins/storage-dexie";

const db = await createRxDatabase({
  name: "family",
  storage: getRxStorageDexie({ indexedDB, IDBKeyRange }),
});
// The lines above are the README's "Dexie storage in Node" snippet, verbatim
// (tests/ecosystem/test_rxdb.py checks it): a collection on it, written and queried.
await db.addCollections({
  people: {
    schema: {
      version: 0,
      primaryKey: "id",
      type: "object",
      properties: { id: { type: "string", maxLength: 64 }, givenName: { type: "string" } },
      required: ["id"],
    },
  },
});
await db.people.bulkInsert([{ id: "ann", givenName: "Ann" }, { id: "bob", givenName: "Bob" }]);
const found = await db.people.find({ selector: { givenName: { $gt: "Al" } }, sort: [{ id: "asc" }] }).exec();
console.log(JSON.stringify({ storage: db.storage.name, found: found.map((d) => d.id) }));
await db.close();

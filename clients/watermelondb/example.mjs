// A WatermelonDB device, whole (README.md shows it): the generated schema, a model,
// the adapter, the Database, the sync; a person saved, synced, edited, synced again,
// and the tenant's people printed. LokiJS in memory here (Node); an app passes its own
// adapter (SQLite in React Native, LokiJS over IndexedDB in a browser). From
// clients/watermelondb after `npm ci` (Node 19+), with the API up:
//   ../../scripts/generate-clients --out generated
//   node example.mjs http://127.0.0.1:8000/graphql family1 "$(../../scripts/token --sub me --tenant family1)"
import { Database, Model } from "@nozbe/watermelondb";
import LokiModule from "@nozbe/watermelondb/adapters/lokijs/index.js";
import loggerModule from "@nozbe/watermelondb/utils/common/logger/index.js";
import { createSyncAPI } from "@offline-sync-api/watermelondb";
// Written from the app's catalog by scripts/generate-clients (docs/clients.md): the
// appSchema, its migrations, the column map and the release, never by hand.
import { migrations, release, schema, tables } from "./generated/watermelondb/schema.js";

const LokiJSAdapter = LokiModule.default ?? LokiModule;
(loggerModule.default ?? loggerModule).silence(); // WatermelonDB's own log lines
const [url, tenantID, token] = process.argv.slice(2);

// With Babel's decorators: @field("given_name") givenName; in plain JavaScript:
class Person extends Model {
  static table = "person"; // the generated table of the catalog's Person
  get givenName() {
    return this._getRaw("given_name");
  }
  get familyName() {
    return this._getRaw("family_name");
  }
}

// A model for each table the generated schema syncs (the family app's three types).
class Reminder extends Model {
  static table = "reminder";
}
class Member extends Model {
  static table = "member";
}

const adapter = new LokiJSAdapter({
  schema,
  migrations,
  dbName: `example-${tenantID}`,
  useWebWorker: false, // Node: in memory
  useIncrementalIndexedDB: false, // required (a browser app: true)
});
const database = new Database({ adapter, modelClasses: [Person, Reminder, Member] });

const api = createSyncAPI({
  database,
  url,
  tenantID,
  getToken: async () => token, // ask your auth for a fresh one (refresh: true after a 401)
  tables, // each table's type and its columns' names, generated
  release, // the catalog release the generated files are of
  onRejected: ({ table, id, code }) => console.warn("not synced", table, id, code),
});

const people = database.get("person");
await api.sync(); // the tenant's people, pulled

// Saved locally at once (offline too); the next sync pushes it.
const ann = await database.write(() =>
  people.create((person) => {
    person._setRaw("given_name", "Ann");
  }),
);
await api.sync();
await database.write(() => ann.update((person) => person._setRaw("family_name", "Lee")));
await api.sync();

for (const person of await people.query().fetch()) {
  console.log(person.id, person.givenName ?? "", person.familyName ?? "");
}
process.exit(0); // LokiJS keeps a timer of its own running

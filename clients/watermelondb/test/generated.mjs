// The schemas scripts/generate-clients writes, used as an app uses them with
// WatermelonDB (unmodified, from npm, LokiJS in memory). family: a device of the
// app's release 1 (its generated appSchema and column map) syncs a person and a
// reminder, is upgraded in place to release 2 (the generated schemaMigrations run on
// its storage, as an app update does), and a new device of release 2 reads the same.
// tasks: two devices sync a task of every kind (lists and objects in JSON columns),
// one edits it, both end equal.
// Usage: node test/generated.mjs <graphql url> <bearer token> <tenant> <family|tasks>
// Prints one JSON line of findings for tests/ecosystem/test_generated_clients.py.
import { Database, Model } from "@nozbe/watermelondb";
import LokiModule from "@nozbe/watermelondb/adapters/lokijs/index.js";
import loggerModule from "@nozbe/watermelondb/utils/common/logger/index.js";
import { createSyncAPI } from "../index.js";
import * as first from "./generated/family-1.js";
import * as second from "./generated/family-2.js";
import * as tracker from "./generated/tasks-1.js";

const LokiJSAdapter = LokiModule.default ?? LokiModule;
(loggerModule.default ?? loggerModule).silence();
const [url, token, tenant, app] = process.argv.slice(2);

// A model per generated table (an app adds its accessors).
const models = (generated) =>
  Object.keys(generated.tables).map((table) => class extends Model { static table = table; });

function device(generated, adapter) {
  const database = new Database({ adapter, modelClasses: models(generated) });
  const rejected = [];
  const api = createSyncAPI({
    database,
    url,
    tenantID: tenant,
    getToken: async () => token,
    tables: generated.tables,
    release: generated.release,
    migrationsEnabledAtVersion: 1,
    onRejected: (r) => rejected.push(r.code),
  });
  return { database, api, adapter, rejected };
}

const raw = async (d, table) =>
  Object.fromEntries(
    (await d.database.get(table).query().fetch()).map((r) => {
      const { _status, _changed, ...rest } = r._raw;
      return [r.id, rest];
    }),
  );

const loki = (generated, name) =>
  new LokiJSAdapter({
    schema: generated.schema,
    migrations: generated.migrations,
    useWebWorker: false,
    useIncrementalIndexedDB: false,
    dbName: name,
  });

const findings = {};
if (app === "tasks") {
  const phone = device(tracker, loki(tracker, `gen-phone-${tenant}`));
  const tablet = device(tracker, loki(tracker, `gen-tablet-${tenant}`));
  const json = JSON.stringify;
  await phone.database.write(async () => {
    await phone.database.get("task").create((t) => {
      t._raw.id = "fence";
      t._setRaw("title", "paint the fence");
      t._setRaw("priority", 3);
      t._setRaw("score", 0.1);
      t._setRaw("tags", json(["home", "Zoë"]));
      t._setRaw("counts", json([0, 2147483647]));
      t._setRaw("stages", json(["TODO", "DONE"]));
      t._setRaw("address", json({ city: "Paris", floor: -5, latitude: 48.8, doorCodes: ["12A"] }));
      t._setRaw("checklist", json([{ text: "buy paint", done: false }]));
      t._setRaw("project_id", "house"); // a Ref (release 2): the project's id, a string
    });
  });
  await phone.api.sync();
  await tablet.api.sync();
  const fence = await tablet.database.get("task").find("fence");
  await tablet.database.write(() =>
    fence.update((t) => {
      t._setRaw("address", json({ city: "Lyon" }));
      t._setRaw("priority", 5);
    }),
  );
  await tablet.api.sync();
  await phone.api.sync();
  findings.phone = await raw(phone, "task");
  findings.tablet = await raw(tablet, "task");
  findings.rejected = [...phone.rejected, ...tablet.rejected];
  console.log(JSON.stringify(findings));
  process.exit(0);
}
const old = device(first, loki(first, `gen-old-${tenant}`));
findings.oldTables = Object.keys(first.tables);
let ann;
await old.database.write(async () => {
  ann = await old.database.get("person").create((p) => {
    p._setRaw("given_name", "Ann");
    p._setRaw("relationship", "PARTNER");
  });
  await old.database.get("reminder").create((r) => {
    r._setRaw("title", "milk");
    r._setRaw("person_id", ann.id);
    r._setRaw("completed", false);
  });
});
await old.api.sync();

// The app updated in place: the same storage, migrated by the generated steps.
const clone = await old.database.adapter.underlyingAdapter.testClone({ schema: second.schema, migrations: second.migrations });
const upgraded = device(second, clone);
findings.upgradedVersion = upgraded.database.adapter.schema.version;
await upgraded.api.sync();
findings.upgradedPeople = await raw(upgraded, "person");
findings.upgradedMembers = await raw(upgraded, "member");

const fresh = device(second, loki(second, `gen-new-${tenant}`));
await fresh.api.sync();
findings.freshPeople = await raw(fresh, "person");
findings.freshReminders = await raw(fresh, "reminder");
findings.upgradedReminders = await raw(upgraded, "reminder");
findings.rejected = [...old.rejected, ...upgraded.rejected, ...fresh.rejected];
findings.ann = ann.id;
console.log(JSON.stringify(findings));
process.exit(0);

// The schemas scripts/generate-clients writes, used as an app uses them with
// WatermelonDB (unmodified, from npm, LokiJS in memory): a device of the app's
// release 1 (its generated appSchema and column map) syncs a person and a reminder,
// is upgraded in place to release 2 (the generated schemaMigrations run on its
// storage, as an app update does), and a new device of release 2 reads the same.
// Usage: node test/generated.mjs <graphql url> <bearer token> <tenant>
// Prints one JSON line of findings for tests/ecosystem/test_generated_clients.py.
import { Database, Model } from "@nozbe/watermelondb";
import LokiModule from "@nozbe/watermelondb/adapters/lokijs/index.js";
import loggerModule from "@nozbe/watermelondb/utils/common/logger/index.js";
import { createSyncAPI } from "../index.js";
import * as first from "./generated/release-1.js";
import * as second from "./generated/release-2.js";

const LokiJSAdapter = LokiModule.default ?? LokiModule;
(loggerModule.default ?? loggerModule).silence();
const [url, token, tenant] = process.argv.slice(2);

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

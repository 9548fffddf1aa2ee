// A real GraphQL client library against the running server: create, a conflicting
// update (read from extensions.code / extensions.current), delete, and a paged sync.
// Then the same cache read by a device whose token no longer lists the tenant: the
// refusal (FORBIDDEN, reason NOT_A_MEMBER) evicts the tenant's entities and pages, as
// docs/clients.md shows ("When a device loses a tenant").
// Usage: node apollo_sync.mjs <graphql url> <token> <tenant> <a token without the tenant>
import apollo from "@apollo/client/core/core.cjs";

const { ApolloClient, InMemoryCache, HttpLink, gql } = apollo;
const [url, token, tenant, otherToken] = process.argv.slice(2);

const client = new ApolloClient({
  link: new HttpLink({ uri: url, headers: { authorization: `Bearer ${token}` }, fetch }),
  cache: new InMemoryCache({
    possibleTypes: { SynchronizedItem: ["Person", "Reminder", "DeletedItem"] },
  }),
  defaultOptions: {
    mutate: { errorPolicy: "all" },
    query: { errorPolicy: "all", fetchPolicy: "no-cache" },
  },
});

const PERSON = gql`fragment P on Person { id changeToken givenName familyName }`;
const CREATE = gql`${PERSON} mutation Create($input: CreatePersonInput!) {
  createPerson(input: $input) { person { ...P } } }`;
const UPDATE = gql`${PERSON} mutation Update($input: UpdatePersonInput!) {
  updatePerson(input: $input) { person { ...P } } }`;
const DELETE = gql`mutation Delete($input: DeletePersonInput!) {
  deletePerson(input: $input) { deletedItem { id type changeToken } } }`;
const CHANGES = gql`query Sync($t: ID!, $since: ID, $cursor: String) {
  changes(tenantID: $t, since: $since, cursor: $cursor, limit: 2) {
    items { __typename id changeToken ... on Person { givenName } ... on DeletedItem { type } }
    cursor changeToken } }`;

const report = {};
const created = await client.mutate({
  mutation: CREATE, variables: { input: { tenantID: tenant, person: { givenName: "Ada" } } },
});
const ada = created.data.createPerson.person;
for (const name of ["Bo", "Cy"]) {
  await client.mutate({
    mutation: CREATE, variables: { input: { tenantID: tenant, person: { givenName: name } } },
  });
}
const updated = await client.mutate({
  mutation: UPDATE,
  variables: { input: { tenantID: tenant, id: ada.id, changeToken: ada.changeToken,
                        changes: { familyName: "Lovelace" } } },
});
report.updatedToken = updated.data.updatePerson.person.changeToken;

// The same edit again, from a device that still has the first token: a conflict.
const conflict = await client.mutate({
  mutation: UPDATE,
  variables: { input: { tenantID: tenant, id: ada.id, changeToken: ada.changeToken,
                        changes: { familyName: "Byron" } } },
});
const error = conflict.errors[0];
report.conflictCode = error.extensions.code;
report.conflictCurrentToken = error.extensions.currentChangeToken;
report.conflictCurrent = error.extensions.current;

const deleted = await client.mutate({
  mutation: DELETE,
  variables: { input: { tenantID: tenant, id: ada.id,
                        changeToken: error.extensions.currentChangeToken } },
});
report.deleted = deleted.data.deletePerson.deletedItem;

const items = [];
let cursor = null;
let pages = 0;
let lastToken = null;
do {
  const { data } = await client.query({ query: CHANGES, variables: { t: tenant, since: null, cursor } });
  items.push(...data.changes.items);
  cursor = data.changes.cursor;
  lastToken = data.changes.changeToken;
  pages += 1;
} while (cursor);
report.sync = { items, pages, changeToken: lastToken };

// docs/clients.md, "When a device loses a tenant", as written there.
const lost = (errors = []) =>
  errors.some((e) => e.extensions?.code === "FORBIDDEN" && e.extensions?.reason === "NOT_A_MEMBER");

function letGo(client, tenantID) {
  const { cache } = client;
  for (const [id, entity] of Object.entries(cache.extract())) {
    if (entity?.tenantID === tenantID) cache.evict({ id });
  }
  cache.evict({ id: "ROOT_QUERY", fieldName: "changes" });
  cache.gc();
}

const CACHED = gql`query Cached($t: ID!) {
  changes(tenantID: $t, limit: 100) {
    items { __typename id tenantID changeToken ... on Person { givenName } ... on DeletedItem { type } }
    cursor changeToken } }`;
await client.query({ query: CACHED, variables: { t: tenant }, fetchPolicy: "network-only" });
const held = (cache) => Object.values(cache.extract()).filter((e) => e?.tenantID === tenant).length;
report.cachedBefore = held(client.cache);
const removed = new ApolloClient({
  link: new HttpLink({ uri: url, headers: { authorization: `Bearer ${otherToken}` }, fetch }),
  cache: client.cache, // the same device's cache, its token replaced
  defaultOptions: { query: { errorPolicy: "all" } },
});
const refused = await removed.query({ query: CACHED, variables: { t: tenant }, fetchPolicy: "network-only" });
report.refusedReason = refused.errors?.[0]?.extensions?.reason ?? null;
if (lost(refused.errors)) letGo(removed, tenant);
report.cachedAfter = held(removed.cache);
report.pagesAfter = Object.keys(removed.cache.extract().ROOT_QUERY ?? {}).filter((k) => k.startsWith("changes")).length;
console.log(JSON.stringify(report));

// A real GraphQL client library against the running server: create, a conflicting
// update (read from extensions.code / extensions.current), delete, and a paged sync.
// Then the same cache read by a device whose token no longer lists the tenant: the
// refusal (FORBIDDEN, reason NOT_A_MEMBER) evicts the tenant's entities and pages, as
// docs/clients.md shows ("When a device loses a tenant"). Then a letter the owner
// shares with Bob and unshares while Bob's edit of it is held offline: his next page's
// LeftViewItem runs docs/clients.md's Apollo recipe ("When a record leaves a member's
// view"), which test_clients.py extracts from the page into left_view_recipe.mjs.
// Usage: node apollo_sync.mjs <graphql url> <token> <tenant> <a token without the tenant>
//          <bob's token, a writer of the tenant>
import apollo from "@apollo/client/core/core.cjs";
import { OfflineQueue, letGoOfRecord } from "./left_view_recipe.mjs";

const { ApolloClient, ApolloLink, InMemoryCache, HttpLink, gql } = apollo;
const [url, token, tenant, otherToken, bobToken] = process.argv.slice(2);

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

// docs/clients.md, "When a record leaves a member's view": the recipe as written.
const V3 = { "X-Sync-Release": "3" }; // the family app's visibilitySince: LeftViewItem
const owner = new ApolloClient({
  link: new HttpLink({ uri: url, headers: { authorization: `Bearer ${token}`, ...V3 }, fetch }),
  cache: new InMemoryCache(),
});
const SHARE = gql`${PERSON} mutation Share($input: CreatePersonInput!) {
  createPerson(input: $input) { person { ...P } } }`;
const shareInput = { tenantID: tenant, person: { givenName: "Letter" }, visibility: { sharedWith: ["bob"] } };
const letter = (await owner.mutate({ mutation: SHARE, variables: { input: shareInput } })).data.createPerson.person;
const queue = new OfflineQueue();
const bob = new ApolloClient({
  link: ApolloLink.from([queue, new HttpLink({ uri: url, headers: { authorization: `Bearer ${bobToken}`, ...V3 }, fetch })]),
  cache: new InMemoryCache({
    possibleTypes: { SynchronizedItem: ["Person", "Reminder", "DeletedItem", "LeftViewItem"] },
  }),
});
const PAGE = gql`query Page($t: ID!, $since: ID) {
  changes(tenantID: $t, since: $since, limit: 100) {
    items { __typename id tenantID changeToken ... on Person { givenName familyName }
            ... on DeletedItem { type } ... on LeftViewItem { type } }
    cursor changeToken } }`;
const page = async (since) =>
  (await bob.query({ query: PAGE, variables: { t: tenant, since }, fetchPolicy: "network-only" })).data.changes;
const people = (optimistic) =>
  Object.values(bob.cache.extract(optimistic)).filter((e) => e?.__typename === "Person").map((e) => e.givenName).sort();
const first = await page(null);
const lv = { firstPage: first.items.map((i) => i.givenName ?? i.__typename).sort() };
queue.online = false; // offline: the edit is held, shown optimistically
const edit = bob
  .mutate({
    mutation: UPDATE,
    variables: { input: { tenantID: tenant, id: letter.id, changeToken: letter.changeToken, changes: { familyName: "Bob's" } } },
    optimisticResponse: {
      updatePerson: { __typename: "UpdatePersonPayload", person: { ...letter, familyName: "Bob's" } },
    },
  })
  .then(
    () => ({ code: null }),
    (e) => ({ code: e.graphQLErrors?.[0]?.extensions?.code ?? String(e) }),
  );
lv.optimistic = bob.cache.extract(true)[bob.cache.identify(letter)]?.familyName ?? null;
lv.held = queue.held.length;
const UNSHARE = gql`mutation Unshare($i: SetVisibilityInput!) { setVisibility(input: $i) { item { id changeToken } } }`;
await owner.mutate({
  mutation: UNSHARE,
  variables: { i: { tenantID: tenant, id: letter.id, changeToken: letter.changeToken, visibility: { sharedWith: [] } } },
});
const next = await page(first.changeToken);
lv.nextPage = next.items.map((i) => `${i.__typename}:${i.id === letter.id ? "letter" : i.id}`);
lv.refused = [];
for (const item of next.items) {
  if (item.__typename === "LeftViewItem") {
    const refused = letGoOfRecord(bob, queue, item, { PERSON: "Person", REMINDER: "Reminder" });
    lv.refused.push(...refused.map((op) => op.operationName));
  }
}
// Refused, the mutation settles at once; one never answered stays held.
lv.edit = await Promise.race([edit, new Promise((r) => setTimeout(() => r({ code: "still held" }), 1000))]);
lv.held = [lv.held, queue.held.length];
lv.cached = { root: people(false), optimistic: people(true) };
lv.firstPageRead = bob.cache
  .readQuery({ query: PAGE, variables: { t: tenant, since: null } })
  ?.changes.items.map((i) => i.givenName ?? i.__typename)
  .sort();
const { data: annSees } = await owner.query({
  query: gql`query Letter($t: ID!, $id: ID!) { person(tenantID: $t, id: $id) { givenName familyName } }`,
  variables: { t: tenant, id: letter.id },
  fetchPolicy: "network-only",
});
lv.ownerSees = annSees.person;
report.leftView = lv;
console.log(JSON.stringify(report));
process.exit(0); // a mutation still held would keep Node waiting

// Opens GraphiQL in headless Chromium (Debian's), pastes a token, runs a `changes`
// query and waits for its result; saves a screenshot.
// Usage: node browser.mjs <base url> <token> <tenant> <screenshot path>
import { chromium } from "playwright-core";

const [base, token, tenant, screenshot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const failedRequests = [];
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.on("requestfailed", (request) => failedRequests.push(request.url()));
  await page.goto(`${base}/graphql`, { waitUntil: "networkidle" });
  await page.waitForSelector(".graphiql-container", { timeout: 30000 });

  // Variables and headers: replace the editors' contents the way a person pastes.
  async function fill(tabName, text) {
    await page.locator("button", { hasText: tabName }).click();
    const editor = page.locator(".graphiql-editor-tool .CodeMirror:visible").first();
    await editor.click();
    await page.keyboard.press("Control+A");
    await page.keyboard.press("Delete");
    await page.keyboard.insertText(text);
  }
  await fill("Variables", JSON.stringify({ tenantID: tenant }));
  await fill("Headers", JSON.stringify({ Authorization: `Bearer ${token}` }));
  await page.locator(".graphiql-execute-button").click();
  const result = page.locator(".graphiql-response");
  await result.getByText('"changeToken"').first().waitFor({ timeout: 30000 });
  const text = await result.innerText();
  await page.screenshot({ path: screenshot });
  console.log(JSON.stringify({ result: text, failedRequests }));
} finally {
  await browser.close();
}

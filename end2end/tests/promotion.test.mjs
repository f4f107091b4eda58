// The promotion path in the browser: a user marks a workspace file from the session's toolbar
// (a bad path is refused and what was typed stays), sees it waiting on the dashboard; an admin
// approves it; it lands in the real registry with its provenance.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ARTIFACTS, BASE, PASSWORD, hydrated, launchBrowser, launchByApi, signIn } from './helpers.mjs';

const USER = 'e2e-promote';
const REGISTRY = process.env.E2E_REGISTRY_URL;
const DATA = process.env.E2E_DATA_DIR;

// Loads `url` until the promotion's row says `text` (20 s at most).
async function untilRowSays(page, url, id, text) {
  for (let i = 0; i < 40; i += 1) {
    await page.goto(url);
    const row = page.locator(`tr[data-promotion="${id}"]`);
    await row.waitFor();
    if ((await row.innerText()).includes(text)) return row;
    await page.waitForTimeout(500);
  }
  throw new Error(`promotion ${id} never said "${text}"`);
}

test('a file goes from a session to the registry after an admin approves it', async () => {
  assert.ok(REGISTRY && DATA, 'scripts/e2e.sh sets E2E_REGISTRY_URL and E2E_DATA_DIR');
  const browser = await launchBrowser();
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  try {
    await signIn(page, USER);
    await page.waitForURL(`${BASE}/`);
    await hydrated(page);
    await page.getByText('No promotion yet').waitFor();
    const launched = await launchByApi(page);
    await page.goto(`${BASE}/sessions/${launched.id}`);
    await hydrated(page);
    // The menu comes with the editor: once the session is ready.
    await page.locator('details.promote').waitFor({ timeout: 60_000 });

    // The file, as a notebook would have saved it in the workspace.
    const model = Buffer.from('weights '.repeat(1000));
    mkdirSync(join(DATA, 'workspaces', USER, 'results'), { recursive: true });
    writeFileSync(join(DATA, 'workspaces', USER, 'results', 'model.bin'), model);

    await page.locator('details.promote summary').click();
    await page.getByLabel('File in your workspace').fill('../results/model.bin');
    await page.getByLabel('Name').fill('demo-model');
    await page.getByLabel('Tag').fill('v1');
    await page.locator('.promote-form').getByRole('button', { name: 'Promote' }).click();
    const outcome = page.getByTestId('promote-outcome');
    await outcome.filter({ hasText: 'inside your workspace' }).waitFor();
    assert.equal(await page.getByLabel('Name').inputValue(), 'demo-model', 'typed input stays');
    await page.getByLabel('File in your workspace').fill('results/model.bin');
    await page.locator('.promote-form').getByRole('button', { name: 'Promote' }).click();
    await outcome.filter({ hasText: "waits for an admin's approval" }).waitFor();
    assert.match(await outcome.innerText(), /e2e\/e2e-promote\/demo-model:v1/);
    await page.screenshot({ path: `${ARTIFACTS}/promote.png` });

    await page.goto(`${BASE}/`);
    const mine = page.locator('[data-testid=promotions] tr[data-promotion]');
    await mine.first().waitFor();
    assert.match(await mine.first().innerText(), /waiting for approval/);
    const promotionId = await mine.first().getAttribute('data-promotion');

    // The admin approves it on the Promotions tab.
    const admin = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await signIn(admin, 'admin');
    await admin.waitForURL(`${BASE}/`);
    await admin.goto(`${BASE}/admin?tab=promotions&filter=pending`);
    await hydrated(admin);
    // A fresh sign-in: the admin confirms with the password first.
    await admin.getByLabel('Your password').fill(PASSWORD);
    await admin.getByRole('button', { name: 'Confirm' }).click();
    const row = admin.locator(`tr[data-promotion="${promotionId}"]`);
    await row.waitFor();
    assert.match(await row.innerText(), new RegExp(USER));
    await admin.screenshot({ path: `${ARTIFACTS}/admin-promotions.png` });
    await row.getByRole('button', { name: 'Approve' }).click();
    // Approved, it leaves the list of those waiting.
    await row.waitFor({ state: 'detached' });
    // The push happens in the background: the full list shows it pushed once it is.
    await untilRowSays(admin, `${BASE}/admin?tab=promotions`, promotionId, 'in the registry');
    await admin.close();

    // The user sees where it went; the registry has it, with who and where it came from.
    const done = await untilRowSays(page, `${BASE}/`, promotionId, 'in the registry');
    await done.scrollIntoViewIfNeeded();
    await page.screenshot({ path: `${ARTIFACTS}/promotions.png` });
    assert.match(await done.innerText(), /e2e\/e2e-promote\/demo-model@sha256:[0-9a-f]{64}/);
    const answer = await fetch(`${REGISTRY}/v2/e2e/e2e-promote/demo-model/manifests/v1`, {
      headers: { accept: 'application/vnd.oci.image.manifest.v1+json' },
    });
    assert.equal(answer.status, 200);
    const manifest = await answer.json();
    assert.equal(manifest.annotations['dev.gpu-sandbox.promotion.user'], USER);
    assert.equal(manifest.annotations['dev.gpu-sandbox.promotion.session'], launched.id);
    assert.equal(manifest.annotations['dev.gpu-sandbox.promotion.approved-by'], 'admin');
    assert.equal(manifest.layers[0].size, model.length);

    await page.evaluate((id) => fetch(`/api/v1/sessions/${id}`, { method: 'DELETE' }), launched.id);
  } finally {
    await browser.close();
  }
});

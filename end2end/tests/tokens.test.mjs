// API tokens in the browser: make one (with the password), see its secret once, use it, revoke it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BASE, PASSWORD, hydrated, launchBrowser, signIn } from './helpers.mjs';

test('a token is made with the password, shown once, works, and stops working when revoked', async () => {
  const browser = await launchBrowser();
  const page = await browser.newPage();
  try {
    await signIn(page);
    await page.waitForURL(`${BASE}/`);
    await hydrated(page);
    await page.getByRole('link', { name: 'API tokens' }).click();
    await page.waitForURL(`${BASE}/tokens`);
    await hydrated(page);

    await page.getByLabel('Label').fill('e2e script');
    await page.getByLabel('Expires').selectOption('7');
    // Only what the script needs: reading, not launching or reaching editors.
    await page.getByRole('checkbox', { name: /^sessions/ }).uncheck();
    await page.getByRole('checkbox', { name: /^access/ }).uncheck();
    await page.getByRole('checkbox', { name: /^tokens/ }).uncheck();
    await page.getByLabel('Your password').fill('not-the-password');
    await page.getByRole('button', { name: 'Make token' }).click();
    await page.getByRole('alert').waitFor();
    assert.match(await page.getByRole('alert').innerText(), /not your password/);

    await page.getByLabel('Your password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Make token' }).click();
    const secret = await page.getByTestId('new-token').inputValue();
    assert.match(secret, /^gsb_/);
    const row = page.getByTestId('token-row').filter({ hasText: 'e2e script' });
    await row.waitFor();
    assert.match(await row.innerText(), /\bread\b/);
    assert.doesNotMatch(await row.innerText(), /sessions|access/);

    const me = await fetch(`${BASE}/api/v1/me`, { headers: { authorization: `Bearer ${secret}` } });
    assert.equal(me.status, 200);
    const launch = await fetch(`${BASE}/api/v1/sessions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
      body: JSON.stringify({ editor: 'jupyterlab', slice_mib: 8192, duration_minutes: 30 }),
    });
    assert.equal(launch.status, 403, 'a read-only token launches nothing');

    // The secret is shown once: a reload shows only the list.
    await page.reload();
    await hydrated(page);
    await page.getByTestId('token-row').first().waitFor();
    assert.equal(await page.getByTestId('new-token').count(), 0);

    await page.getByRole('button', { name: 'Revoke e2e script' }).click();
    await page.getByTestId('token-row').filter({ hasText: 'e2e script' }).waitFor({ state: 'detached' });
    const after = await fetch(`${BASE}/api/v1/me`, { headers: { authorization: `Bearer ${secret}` } });
    assert.equal(after.status, 401);

    // A new secret has a Copy button; revoked, it leaves the page.
    await page.getByLabel('Label').fill('e2e copied');
    await page.getByLabel('Your password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Make token' }).click();
    const copied = await page.getByTestId('new-token').inputValue();
    await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: BASE });
    await page.getByRole('button', { name: 'Copy the new token' }).click();
    await page.locator('.made-token').getByRole('status').filter({ hasText: 'Copied.' }).waitFor();
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), copied);
    await page.getByRole('button', { name: 'Revoke e2e copied' }).click();
    await page.getByTestId('token-row').filter({ hasText: 'e2e copied' }).waitFor({ state: 'detached' });
    assert.equal(await page.getByTestId('new-token').count(), 0, 'the revoked secret is gone');
    assert.equal(await page.getByText(copied).count(), 0);
  } finally {
    await browser.close();
  }
});

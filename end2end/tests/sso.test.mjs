// Single sign-on in the browser: "Sign in with …" through a real OpenID Connect provider
// (oidc-provider, started by scripts/e2e.sh), and the clear line a refused sign-in gets.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BASE, hydrated, launchBrowser } from './helpers.mjs';

const PROVIDER = process.env.E2E_OIDC_URL ?? 'http://127.0.0.1:3101';

async function nextAccount(name) {
  const answer = await fetch(`${PROVIDER}/test/next-account`, { method: 'POST', body: name });
  assert.equal(answer.status, 204);
}

test('a person signs in through the identity provider; a name a local account has is refused', async () => {
  const browser = await launchBrowser();
  try {
    await nextAccount('olga');
    const page = await browser.newPage();
    await page.goto(`${BASE}/login`);
    await hydrated(page);
    await page.getByRole('link', { name: 'Sign in with Test IdP' }).click();
    await page.waitForURL(`${BASE}/`);
    await page.getByTestId('credit-balance').waitFor();
    assert.equal(await page.getByTestId('user-name').innerText(), 'olga');
    // The provider's group made her an admin.
    await page.locator('.user').getByRole('link', { name: 'Admin', exact: true }).waitFor();

    // A local account is named "admin": the provider's "admin" does not become it.
    await nextAccount('admin');
    const other = await browser.newContext();
    const refused = await other.newPage();
    await refused.goto(`${BASE}/login`);
    await hydrated(refused);
    await refused.getByRole('link', { name: 'Sign in with Test IdP' }).click();
    await refused.waitForURL(`${BASE}/login?sso=taken`);
    const alert = refused.getByRole('alert');
    await alert.waitFor();
    assert.match(await alert.innerText(), /belongs to another account here/);
  } finally {
    await browser.close();
  }
});

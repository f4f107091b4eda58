// A real OpenID Connect provider (oidc-provider) for the tests, on 127.0.0.1.
//
//   node end2end/oidc/provider.mjs PORT REDIRECT_URI [REDIRECT_URI ...]
//
// PORT 0 takes a free port: a port found free beforehand by the caller could be taken by
// someone else (another test's server) before this binds it.
//
// Client `sandbox` / secret `sandbox-secret`, PKCE required. Its sign-in step asks nobody: it
// signs in the account last named by `POST /test/next-account` (body: the account id), "olga"
// until then, and grants what the client asked for. Accounts: olga (group gpu-admins), omar (no
// groups), admin (a name the product's own first account has), eve (an unverified address, omar's). Prints "ready PORT" once it listens.
import http from 'node:http';
import Provider from 'oidc-provider';

const [port, ...redirectUris] = process.argv.slice(2);
const accounts = {
  olga: { preferred_username: 'olga', name: 'Olga', email: 'olga@example.test', email_verified: true, groups: ['gpu-admins', 'staff'] },
  omar: { preferred_username: 'omar', name: 'Omar', email: 'omar@example.test', email_verified: true, groups: ['staff'] },
  admin: { preferred_username: 'admin', name: 'Not the admin', groups: [] },
  // Typed a colleague's address, which the provider never verified.
  eve: { preferred_username: 'eve', name: 'Eve', email: 'omar@example.test', email_verified: false, groups: [] },
};
let nextAccount = 'olga';

// The issuer names the port, which is known once the server listens.
const configure = (issuer) => new Provider(issuer, {
  clients: [
    {
      client_id: 'sandbox',
      client_secret: 'sandbox-secret',
      redirect_uris: redirectUris,
      grant_types: ['authorization_code'],
      response_types: ['code'],
    },
  ],
  pkce: { required: () => true },
  scopes: ['openid', 'profile', 'email', 'groups'],
  claims: {
    openid: ['sub'],
    profile: ['preferred_username', 'name'],
    email: ['email', 'email_verified'],
    groups: ['groups'],
  },
  features: { devInteractions: { enabled: false } },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  cookies: { keys: ['test-only-cookie-key'] },
  async findAccount(ctx, id) {
    const claims = accounts[id];
    if (!claims) return undefined;
    return { accountId: id, claims: async () => ({ sub: id, ...claims }) };
  },
});

let provider;
let callback;
const server = http
  .createServer(async (req, res) => {
    try {
      if (req.method === 'POST' && req.url === '/test/next-account') {
        let body = '';
        for await (const chunk of req) body += chunk;
        nextAccount = body.trim();
        res.writeHead(204).end();
        return;
      }
      if (req.url.startsWith('/interaction/')) {
        const details = await provider.interactionDetails(req, res);
        const grant = new provider.Grant({ accountId: nextAccount, clientId: details.params.client_id });
        grant.addOIDCScope(details.params.scope);
        const grantId = await grant.save();
        await provider.interactionFinished(
          req,
          res,
          { login: { accountId: nextAccount }, consent: { grantId } },
          { mergeWithLastSubmission: false },
        );
        return;
      }
      callback(req, res);
    } catch (e) {
      console.error(e);
      res.writeHead(500).end(String(e));
    }
  })
  .listen(Number(port), '127.0.0.1', () => {
    const bound = server.address().port;
    provider = configure(`http://127.0.0.1:${bound}`);
    callback = provider.callback();
    console.log(`ready ${bound}`);
  });

#pragma once

// Snapshots the routing tests share, written by hand (not by the controller).

#include <string>
#include <vector>

#include "common/snapshot_io.h"
#include "kwd/v1/snapshot.pb.h"

namespace kwd::routing::testing {

struct TestServer {
  std::string name;
  uint32_t capacity = 1;
  v1::ServerState state = v1::SERVER_STATE_READY;
};

inline v1::Group* AddGroup(v1::Snapshot* snapshot, const std::string& key, v1::Kind kind,
                           const std::vector<TestServer>& servers,
                           v1::Strategy strategy = v1::STRATEGY_WEIGHTED_ROUND_ROBIN) {
  v1::Group* group = snapshot->add_groups();
  group->set_key(key);
  group->set_kind(kind);
  group->set_strategy(strategy);
  group->set_load_reset_interval_seconds(25);
  auto* affinity = group->mutable_session_affinity();
  for (auto identifier : {v1::SESSION_IDENTIFIER_SAP_CONTEXTID, v1::SESSION_IDENTIFIER_SAPLB,
                          v1::SESSION_IDENTIFIER_JSESSIONID, v1::SESSION_IDENTIFIER_SAP_EXT_SID}) {
    affinity->add_identifiers(identifier);
  }
  affinity->set_affinity_cookie_enabled(true);
  affinity->set_affinity_cookie_name("kwd_affinity");
  int port = 8000;
  for (const TestServer& s : servers) {
    v1::Server* server = group->add_servers();
    server->set_name(s.name);
    server->set_address("10.0.0." + std::to_string(port - 7999));
    server->set_port(port++);
    server->set_capacity(s.capacity);
    server->set_state(s.state);
  }
  return group;
}

inline void AddRule(v1::VirtualHost* vhost, const std::string& prefix, v1::Kind kind,
                    const std::string& group) {
  v1::Rule* rule = vhost->add_rules();
  rule->set_prefix(prefix);
  rule->set_kind(kind);
  rule->set_group(group);
}

inline void AddPermission(v1::VirtualHost* vhost, v1::PermissionAction action,
                          const std::string& pattern) {
  v1::Permission* permission = vhost->add_permissions();
  permission->set_action(action);
  permission->set_pattern(pattern);
}

// Groups (sorted): erp/diag (abap: app1 c=6, app2 c=3), erp/empty (abap, no
// servers), erp/j2ee (java: j1, j2), erp/public (abap: pub1, pub2).
// Virtual hosts: "" (root abap; rules /empty/, /irj/, /nogroup/, /sap/,
// /sap/bc/gui/; permissions), "*.example.com" (root java, no rules),
// "shop.example.com" (root abap -> erp/public, /shop/ -> erp/j2ee).
inline v1::Snapshot StandardSnapshot() {
  v1::Snapshot s;
  AddGroup(&s, "erp/diag", v1::KIND_ABAP, {{"app1", 6}, {"app2", 3}});
  AddGroup(&s, "erp/empty", v1::KIND_ABAP, {});
  AddGroup(&s, "erp/j2ee", v1::KIND_JAVA, {{"j1", 1}, {"j2", 1}});
  AddGroup(&s, "erp/public", v1::KIND_ABAP, {{"pub1", 1}, {"pub2", 1}});

  v1::VirtualHost* any = s.add_virtual_hosts();
  any->set_default_root_handler(v1::KIND_ABAP);
  any->set_default_abap_group("erp/diag");
  any->set_default_java_group("erp/j2ee");
  AddRule(any, "/empty/", v1::KIND_ABAP, "erp/empty");
  AddRule(any, "/irj/", v1::KIND_JAVA, "erp/j2ee");
  AddRule(any, "/nogroup/", v1::KIND_ABAP, "");
  AddRule(any, "/sap/", v1::KIND_ABAP, "erp/diag");
  AddRule(any, "/sap/bc/gui/", v1::KIND_ABAP, "erp/public");
  AddPermission(any, v1::PERMISSION_ACTION_PERMIT, "/sap/bc/public/*");
  AddPermission(any, v1::PERMISSION_ACTION_DENY, "*.cgi");
  AddPermission(any, v1::PERMISSION_ACTION_SECURE, "/sap/bc/gui/*");
  AddPermission(any, v1::PERMISSION_ACTION_DENY, "/sap/admin*");

  v1::VirtualHost* wildcard = s.add_virtual_hosts();
  wildcard->set_host("*.example.com");
  wildcard->set_default_root_handler(v1::KIND_JAVA);
  wildcard->set_default_java_group("erp/j2ee");

  v1::VirtualHost* shop = s.add_virtual_hosts();
  shop->set_host("shop.example.com");
  shop->set_default_root_handler(v1::KIND_ABAP);
  shop->set_default_abap_group("erp/public");
  AddRule(shop, "/shop/", v1::KIND_JAVA, "erp/j2ee");

  StampSnapshotVersion(&s);
  return s;
}

}  // namespace kwd::routing::testing
